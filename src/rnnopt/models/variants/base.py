"""The variant contract (docs/layout.md, README "Python API"): what every variant is and offers.

A variant is one implementation of one recurrent layer (tanh RNN, LSTM, minGRU or minLSTM) at
one dtype and device. At the boundary everything is numpy: `forward(params, x) -> y` and
`vjp(params, x, grad_y) -> grads`, with params the float64 dict of `rnnopt.init_params`.
`runner(...)` prepares native buffers once, so timing measures the computation alone.

Framework base classes (`NumpyVariant`, `TorchVariant`) implement the boundary; a concrete
variant implements only its maths.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from rnnopt.models.params import gate_count, param_names

DTYPES = ("float64", "float32", "tfloat32", "bfloat16", "float16")
DEVICES = ("cpu", "cuda")


@dataclass
class Variant:
    """Base of all variants. Subclasses set the class attributes below."""

    cell: str
    dtype: str = "float32"
    device: str = "cpu"

    # Class-level description, set by each subclass (ClassVar: not dataclass fields).
    framework: ClassVar[str] = ""  # "numpy" | "torch"
    kind: ClassVar[str] = ""  # "naive", "inplace", ... : the part of the name after the cell
    techniques: ClassVar[tuple[str, ...]] = ()  # seed optimisations it demonstrates
    summary: ClassVar[str] = ""  # one line: what it changes and why
    dtypes: ClassVar[tuple[str, ...]] = ()  # dtypes it supports on some device
    devices: ClassVar[tuple[str, ...]] = ("cpu",)
    compiles: ClassVar[bool] = False  # first call includes compilation (reported as compile_s)
    # What it holds beyond the analytic BPTT minimum (shown when its peak is well above it).
    memory_note: ClassVar[str] = ""

    @property
    def name(self) -> str:
        return f"{self.framework}-{self.cell}-{self.kind}"

    @property
    def gates(self) -> int:
        return gate_count(self.cell)

    def forward(self, params: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
        """y (B, T, H) float64 from x (B, T, I); computed in this variant's dtype."""
        raise NotImplementedError

    def vjp(
        self, params: dict[str, np.ndarray], x: np.ndarray, grad_y: np.ndarray
    ) -> dict[str, np.ndarray]:
        """Float64 gradients of sum(y * grad_y) for every key of params and for "x"."""
        raise NotImplementedError

    def runner(
        self, params: dict[str, np.ndarray], x: np.ndarray, grad_y: np.ndarray, lr: float = 1e-3
    ) -> Runner:
        """A prepared closure set for timing; inputs converted and buffers allocated here."""
        raise NotImplementedError

    def describe(self) -> dict:
        return {
            "variant": self.name,
            "framework": self.framework,
            "cell": self.cell,
            "techniques": list(self.techniques),
            "dtype": self.dtype,
            "device": self.device,
        }


class Runner:
    """Timing closures on native data. `backward` needs a `forward` before it, `update` a
    `backward`.

    `step` is forward + backward + `update`, an SGD update of the runner's own copy of the
    weights: a training step, which the profile times segment by segment.
    `sync` waits for queued device work (no-op on CPU).
    """

    device: str = "cpu"

    def forward(self) -> None:
        raise NotImplementedError

    def backward(self) -> None:
        raise NotImplementedError

    def update(self) -> None:
        raise NotImplementedError

    def step(self) -> None:
        self.forward()
        self.backward()
        self.update()

    def sync(self) -> None:
        return None


# ---------------------------------------------------------------- numpy


class NumpyVariant(Variant):
    """Hooks, on arrays already in `self.np_dtype`:

    - `forward_train(p, x) -> (y, cache)`: y (B, T, H); cache whatever backward needs.
      y may be a view of a workspace buffer, valid until the next call.
    - `backward(p, cache, grad_y) -> grads`: dict with the keys of p plus "x", each a distinct
      array (the runner scales them in place); they may be workspace buffers, valid until the
      next call.
    """

    framework = "numpy"
    dtypes = ("float64", "float32")
    devices = ("cpu",)

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)

    def cast(self, array: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(array, dtype=self.np_dtype)

    def cast_params(self, params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {name: self.cast(params[name]) for name in param_names(self.cell)}

    def forward_train(self, p, x):
        raise NotImplementedError

    def backward(self, p, cache, grad_y):
        raise NotImplementedError

    def forward(self, params, x):
        y, _ = self.forward_train(self.cast_params(params), self.cast(x))
        return np.array(y, dtype=np.float64)

    def vjp(self, params, x, grad_y):
        p = self.cast_params(params)
        _, cache = self.forward_train(p, self.cast(x))
        grads = self.backward(p, cache, self.cast(grad_y))
        return {name: np.array(g, dtype=np.float64) for name, g in grads.items()}

    def runner(self, params, x, grad_y, lr=1e-3):
        return NumpyRunner(self, params, x, grad_y, lr)


class NumpyRunner(Runner):
    def __init__(self, variant: NumpyVariant, params, x, grad_y, lr):
        self.variant = variant
        self.p = variant.cast_params(params)
        self.x = variant.cast(x)
        self.grad_y = variant.cast(grad_y)
        self.lr = lr
        self._cache = None

    def forward(self):
        self._cache = None  # release the previous call's activations before making new ones
        _, self._cache = self.variant.forward_train(self.p, self.x)

    def backward(self):
        self._grads = self.variant.backward(self.p, self._cache, self.grad_y)

    def update(self):
        for name in param_names(self.variant.cell):
            grad = self._grads[name]
            grad *= self.lr  # in place: the update allocates nothing
            self.p[name] -= grad
