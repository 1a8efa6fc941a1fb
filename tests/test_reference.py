"""The float64 reference against torch autograd and against finite differences."""

import numpy as np
import torch

from rnnopt.models import reference
from tests.conftest import max_rel_error, small_problem


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

    def objective(p, x_):
        return float(np.sum(reference.forward(p, x_) * grad_y))

    eps = 1e-6
    rng = np.random.default_rng(0)
    for name in [*params, "x"]:
        base = x if name == "x" else params[name]
        for index in map(tuple, rng.integers(0, base.shape, size=(4, base.ndim))):
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
