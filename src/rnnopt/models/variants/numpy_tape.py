"""A hand-written autograd tape in NumPy: the batched step recorded as a graph of node objects.

Some hand-written autograd code works this way: every operation makes a `Node` whose backward
closure refers to the node itself, so each node sits in a reference cycle. Reference counting
cannot free a cycle; once a call's tape is dropped, its nodes (and the arrays they hold) wait
for Python's cyclic garbage collector. This is the variant on which collection costs time
(C12): the maths is the batched variant's, the memory management is not.
"""

from __future__ import annotations

import numpy as np

from rnnopt.models.variants.base import NumpyVariant


class Node:
    """One value on the tape, its gradient, and how to pass that gradient to its parents."""

    def __init__(self, value: np.ndarray, parents: tuple[Node, ...] = (), needs_grad=True):
        self.value = value
        self.parents = parents
        self.needs_grad = needs_grad
        self.grad: np.ndarray | None = None
        self.propagate = None

    def accumulate(self, grad: np.ndarray) -> None:
        self.grad = grad if self.grad is None else self.grad + grad  # never in place: shared


def _unbroadcast(grad: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum `grad` over the axes that broadcasting added (a bias (G*H,) added to (B, G*H))."""
    return grad.sum(axis=0) if grad.ndim > len(shape) else grad


class Tape(list):
    """Nodes in the order they were made: reversed, a valid order for backward."""

    def leaf(self, value: np.ndarray, needs_grad: bool = True) -> Node:
        return Node(value, needs_grad=needs_grad)

    def record(self, value, parents, local_grads) -> Node:
        """A node of `value`; local_grads(grad) -> one gradient per parent."""
        node = Node(value, parents)

        def propagate():  # refers to `node`, which refers to it: a reference cycle per node
            for parent, grad in zip(node.parents, local_grads(node.grad), strict=True):
                if parent.needs_grad:
                    parent.accumulate(grad)

        node.propagate = propagate
        self.append(node)
        return node

    # ------------------------------------------------------------ operations

    def matmul_t(self, a: Node, w: Node) -> Node:
        """a (B, K) times w (N, K) transposed -> (B, N)."""
        return self.record(a.value @ w.value.T, (a, w), lambda g: (g @ w.value, g.T @ a.value))

    def add(self, a: Node, b: Node) -> Node:
        return self.record(
            a.value + b.value,
            (a, b),
            lambda g: (_unbroadcast(g, a.value.shape), _unbroadcast(g, b.value.shape)),
        )

    def mul(self, a: Node, b: Node) -> Node:
        return self.record(a.value * b.value, (a, b), lambda g: (g * b.value, g * a.value))

    def tanh(self, a: Node) -> Node:
        out = np.tanh(a.value)
        return self.record(out, (a,), lambda g: (g * (1.0 - out * out),))

    def sigmoid(self, a: Node) -> Node:
        out = 0.5 * (1.0 + np.tanh(0.5 * a.value))  # overflow-free, as numpy_common.sigmoid
        return self.record(out, (a,), lambda g: (g * out * (1.0 - out),))

    def columns(self, a: Node, start: int, stop: int) -> Node:
        """a.value[:, start:stop]; the gradient scatters back into a zero (B, N) array."""

        def local_grads(g):
            full = np.zeros_like(a.value)
            full[:, start:stop] = g
            return (full,)

        return self.record(a.value[:, start:stop], (a,), local_grads)


class NumpyTape(NumpyVariant):
    kind = "tape"
    techniques = ("batching", "autograd")
    summary = (
        "batched step recorded on a hand-written autograd tape of node objects in reference "
        "cycles: freed only by the cyclic garbage collector (C12)"
    )
    memory_note = (
        "a node object per operation and step holding its output array, and each gradient "
        "scattered back into a full-width zero array; the previous call's tape waits for the "
        "cyclic collector"
    )

    def forward_train(self, p, x):
        # x (B, T, I); h, c (B, H) nodes; z (B, G*H); y (B, T, H)
        B, T, _ = x.shape
        H = p["weight_hh"].shape[1]
        tape = Tape()
        w = {name: tape.leaf(p[name]) for name in p}
        zeros = np.zeros((B, H), dtype=x.dtype)
        h, c = tape.leaf(zeros, needs_grad=False), tape.leaf(zeros, needs_grad=False)
        steps_x, steps_h = [], []
        for t in range(T):
            x_t = tape.leaf(x[:, t])
            z = tape.add(
                tape.add(tape.matmul_t(x_t, w["weight_ih"]), w["bias_ih"]),
                tape.add(tape.matmul_t(h, w["weight_hh"]), w["bias_hh"]),
            )
            h, c = self._cell(tape, z, c, H)
            steps_x.append(x_t)
            steps_h.append(h)
        y = np.stack([node.value for node in steps_h], axis=1)
        return y, (tape, w, steps_x, steps_h)

    def _cell(self, tape: Tape, z: Node, c: Node, H: int) -> tuple[Node, Node]:
        if self.cell == "rnn":
            return tape.tanh(z), c
        i, f, o = (tape.sigmoid(tape.columns(z, k * H, (k + 1) * H)) for k in (0, 1, 3))
        g = tape.tanh(tape.columns(z, 2 * H, 3 * H))
        c = tape.add(tape.mul(f, c), tape.mul(i, g))
        return tape.mul(o, tape.tanh(c)), c

    def backward(self, p, cache, grad_y):
        # grad_y (B, T, H): seeds each step's h; the tape runs backward in reverse order
        tape, w, steps_x, steps_h = cache
        for t, h in enumerate(steps_h):
            h.accumulate(grad_y[:, t])
        for node in reversed(tape):
            if node.grad is not None:
                node.propagate()
        grads = {name: _owned(w[name].grad, p[name]) for name in p}
        grads["x"] = np.stack([_owned(x_t.grad, x_t.value) for x_t in steps_x], axis=1)
        return grads


def _owned(grad: np.ndarray | None, like: np.ndarray) -> np.ndarray:
    """A fresh array of the gradient (zeros if none reached it): the runner scales in place."""
    return np.zeros_like(like) if grad is None else np.array(grad, dtype=like.dtype)
