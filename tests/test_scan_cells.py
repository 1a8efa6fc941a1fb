"""minGRU / minLSTM: the float64 reference against finite differences, and every scan-cell
variant (sequential loop, log-space parallel scan; NumPy and torch) against the reference:
outputs and every gradient, at several T including T = 1, and with saturated gates."""

import numpy as np
import pytest

from rnnopt.models import reference
from rnnopt.models.params import SCAN_CELLS, init_params, param_names
from rnnopt.models.variants import get_variant, list_variants
from rnnopt.models.verify import verify_variant
from tests.conftest import assert_finite_differences, max_rel_error, small_problem

SCAN_VARIANTS = [name for name in list_variants() if name.split("-")[1] in SCAN_CELLS]


def problem(cell, scale=1.0, **sizes):
    """small_problem's layer with its weights scaled by `scale` (saturating the gates)."""
    params, x, grad_y = small_problem(cell, **sizes)
    return {name: scale * value for name, value in params.items()}, x, grad_y


def test_registry_has_both_ways_of_both_scan_cells():
    assert sorted(SCAN_VARIANTS) == sorted(
        f"{framework}-{cell}-{kind}"
        for framework in ("numpy", "torch")
        for cell in SCAN_CELLS
        for kind in ("seq", "scan")
    )


@pytest.mark.parametrize("cell", SCAN_CELLS)
def test_scan_cells_have_one_projection_and_no_recurrent_weights(cell):
    params = init_params(cell, 5, 7, 0)
    gates = {"mingru": 2, "minlstm": 3}[cell]
    assert tuple(params) == param_names(cell) == ("weight_ih", "bias_ih")
    assert params["weight_ih"].shape == (gates * 7, 5)
    assert np.all(np.abs(params["weight_ih"]) <= 1 / np.sqrt(5))  # nn.Linear's range


@pytest.mark.parametrize("cell", SCAN_CELLS)
def test_reference_gradients_match_finite_differences(cell):
    params, x, grad_y = problem(cell, batch=2, seq_len=4, input_size=3, hidden_size=3)
    grads = reference.vjp(params, x, grad_y, cell)
    assert set(grads) == {"weight_ih", "bias_ih", "x"}

    def forward(p, x_):
        return reference.forward(p, x_, cell)

    assert_finite_differences(forward, params, x, grad_y, grads, np.ndindex)


def test_reference_reduces_to_the_recurrence_it_documents():
    """minGRU by hand at T = 2, H = I = 1: h1 = z1 g(k_h1), h2 = (1 - z2) h1 + z2 g(k_h2)."""
    params = {"weight_ih": np.array([[0.5], [2.0]]), "bias_ih": np.array([0.1, -0.3])}
    x = np.array([[[1.0], [-1.0]]])
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    z1, z2 = sig(0.6), sig(-0.4)
    h1 = z1 * (1.7 + 0.5)  # k_h = 2 - 0.3 >= 0: g = k_h + 1/2
    h2 = (1 - z2) * h1 + z2 * sig(-2.3)  # k_h = -2.3 < 0: g = sigmoid
    y = reference.forward(params, x, "mingru")
    np.testing.assert_allclose(y.ravel(), [h1, h2], rtol=1e-14)


@pytest.mark.parametrize("name", SCAN_VARIANTS)
@pytest.mark.parametrize("seq_len", [1, 2, 7, 33])
def test_variant_equals_reference_at_several_lengths(name, seq_len):
    variant = get_variant(name, "float64")
    params, x, grad_y = problem(variant.cell, seq_len=seq_len)
    assert (
        max_rel_error(variant.forward(params, x), reference.forward(params, x, variant.cell))
        < 1e-12
    )
    grads = variant.vjp(params, x, grad_y)
    expected = reference.vjp(params, x, grad_y, variant.cell)
    assert set(grads) == set(expected)
    for key, value in expected.items():
        assert max_rel_error(grads[key], value) < 1e-11, key


@pytest.mark.parametrize("name", SCAN_VARIANTS)
def test_saturated_gates_stay_finite_and_exact(name):
    """Logits of +-40: sigmoid rounds to 0 or 1, and minLSTM's f and i both underflow to 0
    where both logits are very negative; the log-space scan and f / (f + i) must not
    turn that into 0 / 0 or log 0."""
    variant = get_variant(name, "float64")
    params, x, grad_y = problem(variant.cell, seq_len=16, scale=60.0)
    assert np.max(np.abs(x @ params["weight_ih"].T)) > 40
    y = variant.forward(params, x)
    grads = variant.vjp(params, x, grad_y)
    assert np.all(np.isfinite(y)) and all(np.all(np.isfinite(g)) for g in grads.values())
    assert max_rel_error(y, reference.forward(params, x, variant.cell)) < 1e-10
    expected = reference.vjp(params, x, grad_y, variant.cell)
    for key, value in expected.items():
        assert max_rel_error(grads[key], value) < 1e-9, key


@pytest.mark.parametrize("name", SCAN_VARIANTS)
def test_float32_passes_verification(name):
    assert verify_variant(get_variant(name, "float32")).passed


@pytest.mark.parametrize("cell", SCAN_CELLS)
def test_float32_scan_rounding_grows_with_length_but_stays_small(cell):
    """The scan subtracts prefix sums of size ~T (module docstring of numpy_scan): its float32
    error grows with T, and at T = 1024 it stays within 1e-4 of the float64 reference."""
    variant = get_variant(f"numpy-{cell}-scan", "float32")
    errors = []
    for seq_len in (16, 1024):
        params, x, _ = problem(cell, batch=2, seq_len=seq_len, hidden_size=8)
        errors.append(max_rel_error(variant.forward(params, x), reference.forward(params, x, cell)))
    assert errors[1] < 1e-4
    assert errors[1] > errors[0]
