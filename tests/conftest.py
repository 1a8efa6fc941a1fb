import numpy as np
import pytest

import rnnopt


@pytest.fixture(params=["rnn", "lstm"])
def cell(request):
    return request.param


def small_problem(cell: str, batch=3, seq_len=5, input_size=4, hidden_size=6, seed=0):
    """Float64 params, input and upstream gradient of one small layer."""
    rng = np.random.default_rng(seed + 1)
    params = rnnopt.init_params(cell, input_size, hidden_size, seed)
    x = rng.normal(size=(batch, seq_len, input_size))
    grad_y = rng.normal(size=(batch, seq_len, hidden_size))
    return params, x, grad_y


def max_rel_error(actual: np.ndarray, expected: np.ndarray) -> float:
    """max |a - e| / max |e|: relative to the array's scale, robust to entries near zero."""
    scale = max(float(np.max(np.abs(expected))), 1e-300)
    return float(np.max(np.abs(np.asarray(actual, dtype=np.float64) - expected))) / scale
