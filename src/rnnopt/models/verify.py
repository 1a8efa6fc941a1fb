"""Equivalence of a variant with the float64 reference: output and every gradient.

On one small seeded problem (`problem`), a variant's `forward` and `vjp` are compared with
`rnnopt.models.reference`, array by array, as max relative error max|a - e| / max|e| (relative to
the array's scale, so entries near zero do not blow it up). A variant passes when every
error is finite and within its dtype's tolerance.

Tolerances (the same constants the torch-variant tests use):
- float64: 1e-10, far above the ~1e-15 rounding of a T = 5 recurrence, far below any bug.
- float32: 1e-4, about 800 float32 epsilons (1.2e-7): room for the summation order of GEMMs
  and of BPTT's accumulation over T steps.
- bfloat16 / float16: 10 * 2^-8 ~ 3.9e-2. bf16 keeps an 8-bit significand (eps 2^-8); every
  cast of an input, weight, GEMM output or activation is off by up to eps / 2, and weight
  gradients sum B * T rounded products. At this shape the worst error seen over 10 seeds and
  all torch variants was 9e-3 (y) and 1.6e-2 (gradients); 10 eps leaves 2.5x headroom.
  float16 (eps 2^-11) is held to the same bound: its vjp runs without a GradScaler.
- tfloat32 (CUDA): 10 * 2^-10 ~ 9.8e-3, the same 10 eps for TF32's 10-bit significand
  (float32 accumulation, so the error stays at the operands' rounding).
A deliberate error of 1e-3 relative still fails float64 and float32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rnnopt.models import reference
from rnnopt.models.params import PARAM_NAMES, init_params, param_names
from rnnopt.models.variants.base import DTYPES

GRAD_NAMES = (*PARAM_NAMES, "x")  # of the recurrent cells; grad_names(cell) of any
ARRAY_NAMES = ("output", *GRAD_NAMES)
LOW_PRECISION_TOLERANCE = 10 * 2.0**-8
TOLERANCES = {
    "float64": 1e-10,
    "float32": 1e-4,
    "tfloat32": 10 * 2.0**-10,
    "bfloat16": LOW_PRECISION_TOLERANCE,
    "float16": LOW_PRECISION_TOLERANCE,
}
# One tiny shape: torch-*-compile compiles a graph per (cell, dtype, shape); keep it to one.
SHAPE = {"batch": 3, "seq_len": 5, "input_size": 4, "hidden_size": 6}
SEED = 0


def grad_names(cell: str) -> tuple[str, ...]:
    return (*param_names(cell), "x")


def problem(cell: str, seed: int = SEED, shape: dict | None = None):
    """Float64 params, x (B, T, I) and grad_y (B, T, H) of the verification problem."""
    shape = shape or SHAPE
    rng = np.random.default_rng(seed + 1)
    params = init_params(cell, shape["input_size"], shape["hidden_size"], seed)
    x = rng.normal(size=(shape["batch"], shape["seq_len"], shape["input_size"]))
    grad_y = rng.normal(size=(shape["batch"], shape["seq_len"], shape["hidden_size"]))
    return params, x, grad_y


def max_rel_error(actual: np.ndarray, expected: np.ndarray) -> float:
    """max |a - e| / max |e|; inf when the shapes differ."""
    actual = np.asarray(actual, dtype=np.float64)
    if actual.shape != expected.shape:
        return float("inf")
    scale = max(float(np.max(np.abs(expected))), 1e-300)
    return float(np.max(np.abs(actual - expected))) / scale


@dataclass
class VerifyResult:
    """errors: max relative error per array (output, weight_ih, ..., x)."""

    errors: dict[str, float]
    tolerance: float

    @property
    def passed(self) -> bool:
        return all(error <= self.tolerance for error in self.errors.values())  # NaN fails

    @property
    def worst_gradient(self) -> tuple[str, float]:
        grads = {name: error for name, error in self.errors.items() if name != "output"}
        return max(grads.items(), key=lambda item: (math.isnan(item[1]), item[1]))


def compare(forward, vjp, cell: str, tolerance: float, seed: int = SEED) -> VerifyResult:
    """Errors of `forward(params, x)` and `vjp(params, x, grad_y)` against the reference."""
    params, x, grad_y = problem(cell, seed)
    errors = {"output": max_rel_error(forward(params, x), reference.forward(params, x, cell))}
    grads = vjp(params, x, grad_y)
    expected = reference.vjp(params, x, grad_y, cell)
    errors.update({name: max_rel_error(grads[name], expected[name]) for name in grad_names(cell)})
    return VerifyResult(errors, tolerance)


def verify_variant(variant, seed: int = SEED) -> VerifyResult:
    """A built variant (any dtype and device) against the float64 reference."""
    return compare(variant.forward, variant.vjp, variant.cell, TOLERANCES[variant.dtype], seed)


def combinations(variants=None, dtypes=None, devices=None) -> list[tuple[str, str, str]]:
    """(variant, dtype, device) triples each variant implements, in registry order.

    Defaults: every variant, every dtype, and the devices this host has. A requested device the
    host lacks stays in the list (get_variant then raises UnavailableError: a skipped row).
    """
    from rnnopt.models.variants import (
        cuda_available,
        list_variants,
        supported_dtypes,
        variant_class,
    )

    devices = devices or (("cpu", "cuda") if cuda_available() else ("cpu",))
    triples = []
    for name in variants or list_variants():
        cls = variant_class(name)
        for device in (d for d in devices if d in cls.devices):
            allowed = supported_dtypes(cls, device)
            triples += [(name, dtype, device) for dtype in dtypes or DTYPES if dtype in allowed]
    return triples


def verify_reference(cell: str, seed: int = SEED) -> VerifyResult:
    """torch autograd in float64 (nn.RNN / nn.LSTM) against the reference: checks the reference."""

    def forward(params, x):
        return _torch_autograd(cell, params, x)[0]

    def vjp(params, x, grad_y):
        return _torch_autograd(cell, params, x, grad_y)[1]

    return compare(forward, vjp, cell, TOLERANCES["float64"], seed)


def _torch_autograd(cell: str, params, x, grad_y=None):
    """y and (when grad_y is given) the gradients of sum(y * grad_y), by torch autograd."""
    import torch

    layer_class = torch.nn.LSTM if cell == "lstm" else torch.nn.RNN
    layer = layer_class(x.shape[2], params["weight_hh"].shape[1], batch_first=True).double()
    with torch.no_grad():
        for name in PARAM_NAMES:
            getattr(layer, f"{name}_l0").copy_(torch.from_numpy(params[name]))
    x_t = torch.from_numpy(x).requires_grad_(True)
    y, _ = layer(x_t)
    if grad_y is None:
        return y.detach().numpy(), {}
    y.backward(torch.from_numpy(grad_y))
    grads = {name: getattr(layer, f"{name}_l0").grad.numpy() for name in PARAM_NAMES}
    return y.detach().numpy(), {**grads, "x": x_t.grad.numpy()}
