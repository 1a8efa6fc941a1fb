"""The NumPy ladder (naive, inplace, batched, fused) against the float64 reference."""

import tracemalloc
import warnings

import numpy as np
import pytest

import rnnopt
from rnnopt.errors import UserError
from rnnopt.models import reference
from tests.conftest import max_rel_error, small_problem

KINDS = ("naive", "inplace", "batched", "fused", "tape")
TOLERANCE = {"float64": 1e-10, "float32": 1e-4}
SHAPES = [  # (batch, seq_len, input_size, hidden_size)
    (3, 5, 4, 6),
    (1, 1, 4, 6),
    (1, 4, 3, 5),
    (4, 1, 2, 3),
]
TECHNIQUES = {"batching", "preallocation", "hoisted-input-projection", "autograd"}


def assert_matches_reference(variant, cell, shape, seed=0):
    batch, seq_len, input_size, hidden_size = shape
    params, x, grad_y = small_problem(cell, batch, seq_len, input_size, hidden_size, seed)
    tolerance = TOLERANCE[variant.dtype]
    assert max_rel_error(variant.forward(params, x), reference.forward(params, x)) <= tolerance
    grads = variant.vjp(params, x, grad_y)
    expected = reference.vjp(params, x, grad_y)
    assert set(grads) == set(expected)
    for name, value in expected.items():
        assert grads[name].shape == value.shape, name
        assert max_rel_error(grads[name], value) <= tolerance, name


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matches_reference(kind, dtype, cell, shape):
    variant = rnnopt.get_variant(f"numpy-{cell}-{kind}", dtype=dtype)
    assert_matches_reference(variant, cell, shape)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("kind", KINDS)
def test_repeated_calls_and_shape_changes_reuse_buffers_safely(kind, dtype, cell):
    variant = rnnopt.get_variant(f"numpy-{cell}-{kind}", dtype=dtype)
    for seed, shape in enumerate([SHAPES[0], SHAPES[0], SHAPES[2], SHAPES[0], SHAPES[3]]):
        assert_matches_reference(variant, cell, shape, seed)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("kind", KINDS)
def test_saturated_gates_stay_finite_and_silent(kind, dtype, cell):
    # pre-activations in the hundreds: exp overflows in float32, which must give the limit
    variant = rnnopt.get_variant(f"numpy-{cell}-{kind}", dtype=dtype)
    params, x, grad_y = small_problem(cell)
    params = {name: value * 100.0 for name, value in params.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = variant.forward(params, x)
        grads = variant.vjp(params, x, grad_y)
    tolerance = TOLERANCE[dtype]
    assert max_rel_error(y, reference.forward(params, x)) <= tolerance
    for name, expected in reference.vjp(params, x, grad_y).items():
        assert max_rel_error(grads[name], expected) <= tolerance, name


@pytest.mark.parametrize("kind", KINDS)
def test_float32_stays_float32(kind, cell):
    variant = rnnopt.get_variant(f"numpy-{cell}-{kind}", dtype="float32")
    params, x, grad_y = small_problem(cell)
    p = variant.cast_params(params)
    y, cache = variant.forward_train(p, variant.cast(x))
    grads = variant.backward(p, cache, variant.cast(grad_y))
    assert y.dtype == np.float32
    assert {name: g.dtype for name, g in grads.items()} == {name: np.float32 for name in grads}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("kind", KINDS)
def test_runner_step_moves_weights_by_minus_lr_grad(kind, dtype, cell):
    variant = rnnopt.get_variant(f"numpy-{cell}-{kind}", dtype=dtype)
    params, x, grad_y = small_problem(cell)
    lr = 0.1
    runner = variant.runner(params, x, grad_y, lr=lr)
    # two steps: the second must not see gradients the first scaled in place
    for _ in range(2):
        start = {name: value.astype(np.float64) for name, value in runner.p.items()}
        grads = variant.vjp(start, x, grad_y)
        runner.step()
        for name, value in start.items():
            expected = variant.cast(value) - variant.cast(grads[name]) * lr
            np.testing.assert_array_equal(runner.p[name], expected, err_msg=name)


def traced_peak_bytes(function, *args):
    """Peak bytes traced while function(*args) runs, above what was allocated before; result."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        result = function(*args)
        return tracemalloc.get_traced_memory()[1] - before, result
    finally:
        tracemalloc.stop()


def per_call_peaks(variant, cell, seq_len, hidden_size):
    """Traced peaks of forward_train and backward once the buffers exist (second call)."""
    params, x, grad_y = small_problem(cell, 2, seq_len, 8, hidden_size)
    p, x, grad_y = variant.cast_params(params), variant.cast(x), variant.cast(grad_y)
    _, cache = variant.forward_train(p, x)
    variant.backward(p, cache, grad_y)
    forward_peak, (_, cache) = traced_peak_bytes(variant.forward_train, p, x)
    backward_peak, _ = traced_peak_bytes(variant.backward, p, cache, grad_y)
    return np.array([forward_peak, backward_peak])


def test_inplace_allocates_nothing_in_the_time_loop(cell):
    # What a step allocates would grow with H (any temporary vector) or with T (anything
    # kept); the Python objects a step creates and drops (slice views) do neither.
    variant = rnnopt.get_variant(f"numpy-{cell}-inplace", dtype="float64")
    small = per_call_peaks(variant, cell, seq_len=5, hidden_size=64)
    long = per_call_peaks(variant, cell, seq_len=40, hidden_size=64)
    wide = per_call_peaks(variant, cell, seq_len=5, hidden_size=1024)
    assert np.all(long - small < 64 * 8 * 4), (small, long)
    assert np.all(wide - small < 1024 * 8 / 2), (small, wide)


def test_fused_reuses_its_workspaces(cell):
    # NumPy's own iterator buffers for strided gate slices (a few pages) are allowed here;
    # what must not happen is a workspace allocated per call, or an array kept per step.
    hidden_size = 128
    variant = rnnopt.get_variant(f"numpy-{cell}-fused", dtype="float64")
    short = per_call_peaks(variant, cell, seq_len=5, hidden_size=hidden_size)
    long = per_call_peaks(variant, cell, seq_len=40, hidden_size=hidden_size)
    assert np.all(long < 300_000), long
    assert np.all(long - short < hidden_size * 8 * 4), (short, long)


@pytest.mark.parametrize("kind", KINDS)
def test_descriptive_attributes(kind, cell):
    variant = rnnopt.get_variant(f"numpy-{cell}-{kind}")
    assert variant.name == f"numpy-{cell}-{kind}"
    assert (variant.framework, variant.kind, variant.cell) == ("numpy", kind, cell)
    assert set(variant.techniques) <= TECHNIQUES
    assert bool(variant.techniques) == (kind != "naive")
    assert variant.summary and "\n" not in variant.summary


def test_unsupported_dtype_is_a_user_error_listing_what_is_available():
    with pytest.raises(UserError, match="bfloat16.*available: float64, float32"):
        rnnopt.get_variant("numpy-lstm-fused", dtype="bfloat16")


def test_cuda_is_a_user_error_listing_what_is_available():
    with pytest.raises(UserError, match="cuda.*available: cpu"):
        rnnopt.get_variant("numpy-lstm-fused", device="cuda")
