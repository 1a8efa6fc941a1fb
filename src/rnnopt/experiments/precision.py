"""Precision's effect on the result: error against the float64 reference over a long sequence.

"May lose precision" (C6, C11) as a number: on one seeded problem with a long sequence
(T = 1000 by default), a variant's outputs and gradients are compared with `rnnopt.models.reference`
in float64. The error per time step shows whether rounding accumulates along the recurrence:
`growth` divides the mean error of the last tenth of the steps by that of the first tenth.
"""

from __future__ import annotations

import numpy as np

from rnnopt.models import reference
from rnnopt.models.verify import grad_names, max_rel_error, problem

DEFAULT_SHAPE = {"batch": 4, "seq_len": 1000, "input_size": 32, "hidden_size": 64}


def error_per_step(y: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """(T,) max |y - expected| over batch and hidden units, per time step; y, expected (B, T, H)."""
    return np.max(np.abs(np.asarray(y, np.float64) - expected), axis=(0, 2))


def growth(errors: np.ndarray) -> float | None:
    """Mean error of the last tenth of the steps / mean of the first tenth (None if 0 / 0)."""
    tenth = max(len(errors) // 10, 1)
    first, last = float(np.mean(errors[:tenth])), float(np.mean(errors[-tenth:]))
    return last / first if first > 0 else None


def long_sequence_errors(variant, shape: dict | None = None, seed: int = 0) -> tuple[dict, dict]:
    """(metrics, series) of `variant` (any dtype) against the float64 reference.

    metrics: output.max_abs_error, output.max_rel_error, output.last_step_abs_error,
    output.growth, gradients.<name> (max relative error of each gradient) and
    gradients.worst; series: error_per_step (T,).
    """
    shape = shape or DEFAULT_SHAPE
    params, x, grad_y = problem(variant.cell, seed, shape)
    expected = reference.forward(params, x, variant.cell)
    y = variant.forward(params, x)
    per_step = error_per_step(y, expected)
    expected_grads = reference.vjp(params, x, grad_y, variant.cell)
    grads = variant.vjp(params, x, grad_y)
    grad_errors = {
        name: max_rel_error(grads[name], expected_grads[name]) for name in grad_names(variant.cell)
    }
    metrics = {
        "output": {
            "max_abs_error": float(per_step.max()),
            "max_rel_error": max_rel_error(y, expected),
            "last_step_abs_error": float(per_step[-1]),
            "growth": growth(per_step),
        },
        "gradients": {**grad_errors, "worst": max(grad_errors.values())},
    }
    return metrics, {"error_per_step": [float(e) for e in per_step]}
