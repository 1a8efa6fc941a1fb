import os
import subprocess
import sys

import numpy as np
import pytest

import rnnopt


def sinfo_answers() -> bool:
    """True when a SLURM controller answers `sinfo` (CI starts one: ci/slurm-start.sh)."""
    try:
        done = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and bool(done.stdout.strip())


def pytest_collection_modifyitems(config, items):
    """Tests marked `slurm` skip, with the reason, when no cluster answers; not in CI
    (CI=true), where a cluster that did not start must fail them."""
    marked = [item for item in items if item.get_closest_marker("slurm")]
    if not marked or os.environ.get("CI") == "true" or sinfo_answers():
        return
    skip = pytest.mark.skip(
        reason="no SLURM cluster: `sinfo` does not answer (start one: bash ci/slurm-start.sh)"
    )
    for item in marked:
        item.add_marker(skip)


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


def assert_finite_differences(forward, params, x, grad_y, grads, indices, eps=1e-6):
    """Each gradient in `grads` (every param and "x") against central differences of
    sum(forward(params, x) * grad_y), at the entries `indices(shape)` picks."""

    def objective(p, x_):
        return float(np.sum(forward(p, x_) * grad_y))

    for name in [*params, "x"]:
        base = x if name == "x" else params[name]
        for index in indices(base.shape):
            plus, minus = base.copy(), base.copy()
            plus[index] += eps
            minus[index] -= eps
            if name == "x":
                numeric = (objective(params, plus) - objective(params, minus)) / (2 * eps)
            else:
                numeric = (
                    objective({**params, name: plus}, x) - objective({**params, name: minus}, x)
                ) / (2 * eps)
            assert abs(numeric - grads[name][index]) < 1e-7 * max(1.0, abs(numeric)), (name, index)


def max_rel_error(actual: np.ndarray, expected: np.ndarray) -> float:
    """max |a - e| / max |e|: relative to the array's scale, robust to entries near zero."""
    scale = max(float(np.max(np.abs(expected))), 1e-300)
    return float(np.max(np.abs(np.asarray(actual, dtype=np.float64) - expected))) / scale


def fresh_python(script: str) -> list[str]:
    """The words `script` prints in a fresh interpreter (so that what it imports is its own);
    it must exit 0."""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()
