"""Cell maths shared by the NumPy variants, in two forms of the same equations.

Allocating steps (`lstm_step`, `rnn_step` and their backwards) serve the textbook variants;
in-place ones (`lstm_activate_`, `lstm_state_`, ...) write into caller-owned buffers for the
preallocated ones, whose workspaces come from `Buffers` through `PreallocatedNumpyVariant`.
All work on arrays of shape (..., G*H) / (..., H), so one sequence (H,) or a batch (B, H)
goes through the same code, and every temporary keeps the input dtype.
Gate order i, f, g, o as in PyTorch; h0 = c0 = 0.
"""

from __future__ import annotations

from functools import cached_property
from types import SimpleNamespace

import numpy as np

from rnnopt.models.variants.base import NumpyVariant


def gates(a: np.ndarray) -> tuple[np.ndarray, ...]:
    """The four (..., H) gate views i, f, g, o of a (..., 4H) array."""
    H = a.shape[-1] // 4
    return a[..., :H], a[..., H : 2 * H], a[..., 2 * H : 3 * H], a[..., 3 * H :]


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # overflow-free form of 1 / (1 + exp(-z))


def sigmoid_(z: np.ndarray) -> None:
    """sigmoid(z) in place, same tanh form as `sigmoid`."""
    np.multiply(z, 0.5, out=z)
    np.tanh(z, out=z)
    np.multiply(z, 0.5, out=z)
    np.add(z, 0.5, out=z)


# ---------------------------------------------------------------- allocating steps


def rnn_step(z, c_prev):
    """h = tanh(z); no cell state (c_prev passes through). Returns h, c, saved-for-backward."""
    h = np.tanh(z)
    return h, c_prev, h


def rnn_step_backward(dh, dc_next, h):
    """dz of the pre-activations from dh (all paths into h_t). Returns dz, dc (unused)."""
    return dh * (1.0 - h * h), dc_next


def lstm_step(z, c_prev):
    """z (..., 4H) pre-activations, c_prev (..., H) -> h, c (..., H), saved-for-backward."""
    i, f, g, o = gates(z)
    i, f, g, o = sigmoid(i), sigmoid(f), np.tanh(g), sigmoid(o)
    c = f * c_prev + i * g
    tanh_c = np.tanh(c)
    return o * tanh_c, c, (i, f, g, o, c_prev, tanh_c)


def lstm_step_backward(dh, dc_next, saved):
    """dh (..., H): dL/dh_t; dc_next: dL/dc_t through c_{t+1}. Returns dz (..., 4H), dc_{t-1}."""
    i, f, g, o, c_prev, tanh_c = saved
    dc = dc_next + dh * o * (1.0 - tanh_c * tanh_c)
    dz = np.concatenate(
        [
            dc * g * i * (1.0 - i),
            dc * c_prev * f * (1.0 - f),
            dc * i * (1.0 - g * g),
            dh * tanh_c * o * (1.0 - o),
        ],
        axis=-1,
    )
    return dz, dc * f


STEPS = {"rnn": (rnn_step, rnn_step_backward), "lstm": (lstm_step, lstm_step_backward)}


# ---------------------------------------------------------------- in-place steps
# Whole-row ops where possible: on a (B, 4H) row a gate is a strided (B, H) view, and NumPy
# runs strided operands through its buffered iterator (~3x slower per element, and a malloc).


def lstm_activate_(a) -> None:
    """a (..., 4H): pre-activations in, activations i, f, g, o out (sigmoid, tanh for g)."""
    i, f, g, o = gates(a)
    for gate in (i, f, o):
        sigmoid_(gate)
    np.tanh(g, out=g)


def lstm_state_(a, c_prev, c, tanh_c, h, tmp) -> None:
    """From activations a (..., 4H) and c_prev (..., H), write c = f*c_prev + i*g,
    tanh_c = tanh(c) (kept for backward) and h = o*tanh_c; tmp (..., H) is scratch."""
    i, f, g, o = gates(a)
    np.multiply(f, c_prev, out=c)
    np.multiply(i, g, out=tmp)
    np.add(c, tmp, out=c)
    np.tanh(c, out=tanh_c)
    np.multiply(o, tanh_c, out=h)


def lstm_step_backward_(dh, dc, a, c_prev, tanh_c, dz, tmp) -> None:
    """Gradients of one LSTM step in place.

    dh (..., H): dL/dh_t (all paths). dc (..., H): in, dL/dc_t through c_{t+1}; out, the same
    for step t-1. a (..., 4H): activations i, f, g, o of step t. Writes dz (..., 4H), dL/d(pre-
    activations); tmp (..., H) is scratch.
    """
    i, f, g, o = gates(a)
    dz_i, dz_f, dz_g, dz_o = gates(dz)
    # local derivatives: s - s^2 for the sigmoids (whole row at once), 1 - g^2 for g
    np.multiply(a, a, out=dz)
    np.subtract(a, dz, out=dz)
    np.multiply(g, g, out=dz_g)
    np.subtract(1.0, dz_g, out=dz_g)
    # dc_t = dc_next + dh * o * (1 - tanh(c_t)^2)
    np.multiply(tanh_c, tanh_c, out=tmp)
    np.subtract(1.0, tmp, out=tmp)
    np.multiply(tmp, o, out=tmp)
    np.multiply(tmp, dh, out=tmp)
    np.add(dc, tmp, out=dc)
    # c_t = f*c_prev + i*g and h_t = o*tanh(c_t)
    for dz_gate, other in ((dz_i, g), (dz_f, c_prev), (dz_g, i)):
        np.multiply(dz_gate, other, out=dz_gate)
        np.multiply(dz_gate, dc, out=dz_gate)
    np.multiply(dz_o, tanh_c, out=dz_o)
    np.multiply(dz_o, dh, out=dz_o)
    np.multiply(dc, f, out=dc)


def rnn_step_backward_(dh, h, dz) -> None:
    """dz = dh * (1 - h^2) in place; dh, h, dz (..., H)."""
    np.multiply(h, h, out=dz)
    np.subtract(1.0, dz, out=dz)
    np.multiply(dz, dh, out=dz)


# ---------------------------------------------------------------- buffers


class Buffers:
    """Zeroed arrays allocated once per set of shapes, reused while the shapes stay the same.

    Entries the caller never writes (the h0 = c0 = 0 rows) stay zero across calls.
    """

    def __init__(self, dtype: np.dtype):
        self.dtype = dtype
        self._key: tuple | None = None
        self._arrays: SimpleNamespace | None = None

    def get(self, **shapes: tuple[int, ...]) -> SimpleNamespace:
        key = tuple(shapes.items())
        if key != self._key:
            self._arrays = None  # free the old set before allocating the new one
            self._arrays = SimpleNamespace(
                **{name: np.zeros(shape, self.dtype) for name, shape in shapes.items()}
            )
            self._key = key
        return self._arrays


def time_major_shapes(B: int, T: int, I: int, H: int, GH: int, lstm: bool) -> dict:
    """The forward workspaces of the time-major rungs (numba, persistent), whose backward reads
    them back: X (T*B, I) the input time-major; pre (G*H, T*B) the projection (backward reuses
    it for dz); acts (G*H, T*B) the LSTM activations; hs, cs (H, (T+1)*B), block 0 = h0 = c0 =
    0 (never written); c (H, B) the cell state a kernel carries from step to step; bias
    (G*H,)."""
    return dict(
        X=(T * B, I),
        pre=(GH, T * B),
        acts=(GH, T * B) if lstm else (0, 0),
        hs=(H, (T + 1) * B),
        cs=(H, (T + 1) * B) if lstm else (0, 0),
        c=(H, B) if lstm else (0, 0),
        bias=(GH,),
    )


class PreallocatedNumpyVariant(NumpyVariant):
    """A NumpyVariant whose forward and backward write into workspaces allocated once per set
    of shapes and kept on the variant: `_fwd` and `_bwd` (Buffers, in its dtype)."""

    @cached_property
    def _fwd(self) -> Buffers:
        return Buffers(self.np_dtype)

    @cached_property
    def _bwd(self) -> Buffers:
        return Buffers(self.np_dtype)
