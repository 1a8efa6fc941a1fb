"""The float64 reference against torch autograd and against finite differences."""

import numpy as np
import torch

from rnnopt.models import reference
from tests.conftest import assert_finite_differences, max_rel_error, small_problem


def torch_autograd(cell, params, x, grad_y):
    H = params["weight_hh"].shape[1]
    module = (torch.nn.LSTM if cell == "lstm" else torch.nn.RNN)(
        x.shape[2], H, batch_first=True
    ).double()
    for name, value in params.items():
        getattr(module, f"{name}_l0").data.copy_(torch.from_numpy(value))
    x_t = torch.from_numpy(x).requires_grad_(True)
    y, _ = module(x_t)
    y.backward(torch.from_numpy(grad_y))
    grads = {name: getattr(module, f"{name}_l0").grad.numpy() for name in params}
    return y.detach().numpy(), {**grads, "x": x_t.grad.numpy()}


def test_reference_matches_torch_autograd(cell):
    params, x, grad_y = small_problem(cell)
    y_torch, grads_torch = torch_autograd(cell, params, x, grad_y)
    assert max_rel_error(reference.forward(params, x), y_torch) < 1e-12
    grads = reference.vjp(params, x, grad_y)
    assert set(grads) == set(grads_torch)
    for name, expected in grads_torch.items():
        assert max_rel_error(grads[name], expected) < 1e-12, name


def test_reference_gradients_match_finite_differences(cell):
    params, x, grad_y = small_problem(cell, batch=2, seq_len=3, input_size=2, hidden_size=3)
    grads = reference.vjp(params, x, grad_y)
    rng = np.random.default_rng(0)

    def four_entries(shape):
        return map(tuple, rng.integers(0, shape, size=(4, len(shape))))

    assert_finite_differences(reference.forward, params, x, grad_y, grads, four_entries)
