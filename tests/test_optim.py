"""Numpy SGD / Adam / clipping against torch.optim and torch.nn.utils.clip_grad_norm_."""

import numpy as np
import pytest
import torch

from rnnopt.errors import UserError
from rnnopt.optim import clip_grad_norm, make_optimizer, make_torch_optimizer

SHAPES = {"weight": (5, 3), "bias": (5,), "vector": (7,)}
STEPS = 20


def random_arrays(seed: int, scale: float = 1.0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: scale * rng.normal(size=shape) for name, shape in SHAPES.items()}


@pytest.mark.parametrize(
    ("name", "hyper"),
    [
        ("sgd", {"lr": 0.1}),
        ("sgd", {"lr": 0.05, "momentum": 0.9}),
        ("sgd", {"lr": 0.05, "momentum": 0.9, "dampening": 0.1, "weight_decay": 0.01}),
        ("sgd", {"lr": 0.05, "momentum": 0.8, "nesterov": True, "weight_decay": 0.02}),
        ("adam", {"lr": 0.01}),
        ("adam", {"lr": 0.003, "betas": (0.8, 0.99), "eps": 1e-6, "weight_decay": 0.05}),
    ],
)
def test_optimizer_matches_torch_over_20_steps(name, hyper):
    params = random_arrays(0)
    tensors = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    ours = make_optimizer(name, params, **hyper)
    theirs = make_torch_optimizer(name, list(tensors.values()), **hyper)
    for step in range(STEPS):
        grads = random_arrays(100 + step)
        for key, tensor in tensors.items():
            tensor.grad = torch.tensor(grads[key])
        ours.step(grads)
        theirs.step()
        for key, tensor in tensors.items():
            np.testing.assert_allclose(params[key], tensor.detach().numpy(), rtol=0, atol=1e-12)


def test_optimizer_updates_in_place_and_keeps_dtype():
    params = {k: v.astype(np.float32) for k, v in random_arrays(0).items()}
    originals = {k: v for k, v in params.items()}
    make_optimizer("adam", params, lr=0.1).step(random_arrays(1))
    for key, value in params.items():
        assert value is originals[key] and value.dtype == np.float32


def test_unknown_optimizer_names_the_choices():
    with pytest.raises(UserError, match="sgd, adam"):
        make_optimizer("rmsprop", {}, lr=0.1)


@pytest.mark.parametrize("max_norm", [0.5, 3.0, 1e6])  # clips hard, clips a little, no-op
def test_clip_matches_torch_clip_grad_norm(max_norm):
    grads = random_arrays(3)
    tensors = [
        torch.zeros(v.shape, dtype=torch.float64, requires_grad=True) for v in grads.values()
    ]
    for tensor, grad in zip(tensors, grads.values(), strict=True):
        tensor.grad = torch.tensor(grad)
    before = {k: v.copy() for k, v in grads.items()}
    expected_norm = torch.nn.utils.clip_grad_norm_(tensors, max_norm)
    total_norm = clip_grad_norm(grads, max_norm)
    assert abs(total_norm - float(expected_norm)) <= 1e-12 * total_norm
    for tensor, (key, grad) in zip(tensors, grads.items(), strict=True):
        np.testing.assert_allclose(grad, tensor.grad.numpy(), rtol=0, atol=1e-12)
        if max_norm > total_norm:
            np.testing.assert_array_equal(grad, before[key])  # the no-op leaves them untouched
