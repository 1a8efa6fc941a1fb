"""numpy-{rnn,lstm}-numba: the fused GEMMs with numba gate kernels, both flavours (serial,
parallel), against the float64 reference and torch autograd; its kernels' float32 tanh.
Which flavour runs at which thread count: test_numba_threads."""

import warnings

import numpy as np
import pytest

import rnnopt
from rnnopt.models import reference
from rnnopt.models.variants import numba_kernels
from tests.conftest import max_rel_error, small_problem
from tests.test_numpy_variants import SHAPES, TOLERANCE, assert_matches_reference
from tests.test_reference import torch_autograd

DTYPES = ["float64", "float32"]


@pytest.fixture(params=["serial", "parallel"])
def flavour(request):
    return request.param


def numba_variant(cell: str, dtype: str, flavour: str):
    """The variant running `flavour`'s kernels, whatever the thread count in force."""
    variant = rnnopt.get_variant(f"numpy-{cell}-numba", dtype=dtype)
    variant.kernels = getattr(numba_kernels, flavour.upper())
    return variant


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matches_reference(dtype, cell, shape, flavour):
    assert_matches_reference(numba_variant(cell, dtype, flavour), cell, shape)


@pytest.mark.parametrize("dtype", DTYPES)
def test_matches_torch_autograd(dtype, cell):
    params, x, grad_y = small_problem(cell, batch=4, seq_len=7, input_size=5, hidden_size=9)
    variant = rnnopt.get_variant(f"numpy-{cell}-numba", dtype=dtype)
    y_torch, grads_torch = torch_autograd(cell, params, x, grad_y)
    assert max_rel_error(variant.forward(params, x), y_torch) <= TOLERANCE[dtype]
    grads = variant.vjp(params, x, grad_y)
    assert set(grads) == set(grads_torch)
    for name, expected in grads_torch.items():
        assert max_rel_error(grads[name], expected) <= TOLERANCE[dtype], name


@pytest.mark.parametrize("dtype", DTYPES)
def test_repeated_calls_and_shape_changes_reuse_buffers_safely(dtype, cell, flavour):
    # backward writes dz over the forward's projection, the forward carries c in a buffer:
    # a second vjp must start clean
    variant = numba_variant(cell, dtype, flavour)
    for seed, shape in enumerate([SHAPES[0], SHAPES[0], SHAPES[2], SHAPES[0], SHAPES[3]]):
        assert_matches_reference(variant, cell, shape, seed)


@pytest.mark.parametrize("dtype", DTYPES)
def test_saturated_gates_stay_finite_and_silent(dtype, cell, flavour):
    variant = numba_variant(cell, dtype, flavour)
    params, x, grad_y = small_problem(cell)
    params = {name: value * 100.0 for name, value in params.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = variant.forward(params, x)
        grads = variant.vjp(params, x, grad_y)
    assert max_rel_error(y, reference.forward(params, x)) <= TOLERANCE[dtype]
    for name, expected in reference.vjp(params, x, grad_y).items():
        assert max_rel_error(grads[name], expected) <= TOLERANCE[dtype], name


def test_float32_stays_float32(cell):
    variant = rnnopt.get_variant(f"numpy-{cell}-numba", dtype="float32")
    params, x, grad_y = small_problem(cell)
    p = variant.cast_params(params)
    y, cache = variant.forward_train(p, variant.cast(x))
    grads = variant.backward(p, cache, variant.cast(grad_y))
    assert y.dtype == np.float32
    assert {name: g.dtype for name, g in grads.items()} == {name: np.float32 for name in grads}


@pytest.mark.parametrize("dtype", DTYPES)
def test_runner_step_moves_weights_by_minus_lr_grad(dtype, cell):
    variant = rnnopt.get_variant(f"numpy-{cell}-numba", dtype=dtype)
    params, x, grad_y = small_problem(cell)
    runner = variant.runner(params, x, grad_y, lr=0.1)
    for _ in range(2):
        start = {name: value.astype(np.float64) for name, value in runner.p.items()}
        grads = variant.vjp(start, x, grad_y)
        runner.step()
        for name, value in start.items():
            expected = variant.cast(value) - variant.cast(grads[name]) * 0.1
            np.testing.assert_allclose(runner.p[name], expected, rtol=0, atol=1e-6, err_msg=name)


def test_descriptive_attributes(cell):
    variant = rnnopt.get_variant(f"numpy-{cell}-numba")
    assert (variant.name, variant.kind) == (f"numpy-{cell}-numba", "numba")
    assert "fused-elementwise" in variant.techniques
    assert "hoisted-input-projection" in variant.techniques
    assert variant.compiles  # the first call's compile (or cache load) is reported apart
    assert variant.summary and "\n" not in variant.summary


def test_float32_kernel_tanh_is_accurate_and_saturates():
    from numba import njit

    from rnnopt.models.variants.numba_kernels import gate_tanh

    @njit
    def apply(z, out):
        for k in range(z.size):
            out[k] = gate_tanh(z[k])

    z = np.concatenate([np.linspace(-12, 12, 100_001), [-1e30, -100.0, 1e-30, 100.0, 1e30]])
    for dtype, tolerance in (("float32", 1e-6), ("float64", 1e-15)):
        zt = z.astype(dtype)
        out = np.empty_like(zt)
        apply(zt, out)
        assert out.dtype == dtype
        assert np.max(np.abs(out - np.tanh(zt.astype(np.float64)))) <= tolerance, dtype
