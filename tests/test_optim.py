"""Numpy SGD / Adam / clipping and the torch foreach SGD / Adam against torch.optim and
torch.nn.utils.clip_grad_norm_."""

import numpy as np
import pytest
import torch

from rnnopt.errors import UserError
from rnnopt.train.optim import clip_grad_norm, make_optimizer
from rnnopt.train.torch_optim import TorchAdam, TorchSGD, make_torch_optimizer
from tests.conftest import fresh_python

SHAPES = {"weight": (5, 3), "bias": (5,), "vector": (7,)}
STEPS = 20


def random_arrays(seed: int, scale: float = 1.0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: scale * rng.normal(size=shape) for name, shape in SHAPES.items()}


HYPERPARAMETERS = [
    ("sgd", {"lr": 0.1}),
    ("sgd", {"lr": 0.05, "momentum": 0.9}),
    ("sgd", {"lr": 0.05, "momentum": 0.9, "dampening": 0.1, "weight_decay": 0.01}),
    ("sgd", {"lr": 0.05, "momentum": 0.8, "nesterov": True, "weight_decay": 0.02}),
    ("adam", {"lr": 0.01}),
    ("adam", {"lr": 0.003, "betas": (0.8, 0.99), "eps": 1e-6, "weight_decay": 0.05}),
]
TORCH_OPTIM = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam}


@pytest.mark.parametrize(("name", "hyper"), HYPERPARAMETERS)
def test_optimizer_matches_torch_over_20_steps(name, hyper):
    params = random_arrays(0)
    tensors = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    ours = make_optimizer(name, params, **hyper)
    theirs = TORCH_OPTIM[name](list(tensors.values()), **hyper)
    for step in range(STEPS):
        grads = random_arrays(100 + step)
        for key, tensor in tensors.items():
            tensor.grad = torch.tensor(grads[key])
        ours.step(grads)
        theirs.step()
        for key, tensor in tensors.items():
            np.testing.assert_allclose(params[key], tensor.detach().numpy(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("name", "hyper"), HYPERPARAMETERS)
def test_foreach_optimizer_matches_torch_optim_bit_for_bit(name, hyper, dtype):
    """Same bits as torch.optim over 20 steps, its default (single-tensor on CPU) and foreach
    implementations alike; one parameter without a gradient keeps its value and state."""
    start = {k: torch.tensor(v, dtype=dtype) for k, v in random_arrays(0).items()}
    ours = {k: v.clone().requires_grad_() for k, v in start.items()}
    theirs = {
        foreach: {k: v.clone().requires_grad_() for k, v in start.items()}
        for foreach in (False, True)
    }
    optimizer = make_torch_optimizer(name, list(ours.values()), "float32", **hyper)
    assert isinstance(optimizer, {"sgd": TorchSGD, "adam": TorchAdam}[name])
    references = [
        TORCH_OPTIM[name](list(tensors.values()), foreach=foreach, **hyper)
        for foreach, tensors in theirs.items()
    ]
    for step in range(STEPS):
        grads = random_arrays(100 + step)
        for tensors in (ours, *theirs.values()):
            for key, tensor in tensors.items():
                frozen = key == "vector" and step < 5  # no gradient for its first 5 steps
                tensor.grad = None if frozen else torch.tensor(grads[key], dtype=dtype)
        optimizer.step()
        for reference in references:
            reference.step()
        for tensors in theirs.values():
            for key, tensor in tensors.items():
                assert torch.equal(ours[key], tensor), (key, step)
    assert not torch.equal(ours["vector"], start["vector"])


def test_foreach_optimizer_zero_grad_and_float16_keeps_torch_optim():
    weight = torch.ones(3, requires_grad=True)
    weight.grad = torch.ones(3)
    optimizer = make_torch_optimizer("adam", [weight], "float32", lr=0.1)
    optimizer.zero_grad(set_to_none=False)
    assert torch.equal(weight.grad, torch.zeros(3))
    optimizer.zero_grad()
    assert weight.grad is None
    optimizer.step()  # no gradient: nothing to update
    assert torch.equal(weight, torch.ones(3))
    # GradScaler steps a torch.optim.Optimizer
    assert isinstance(make_torch_optimizer("sgd", [weight], "float16", lr=0.1), torch.optim.SGD)


@pytest.mark.parametrize("factory", [make_optimizer, make_torch_optimizer])
def test_unknown_optimizer_names_the_choices_in_both_frameworks(factory):
    args = ("rmsprop", {}) if factory is make_optimizer else ("rmsprop", [], "float32")
    with pytest.raises(UserError, match="sgd, adam"):
        factory(*args, lr=0.1)


def test_torch_training_step_leaves_torch_dynamo_unimported():
    """A training step of torch-lstm-nn (Adam, clipping) costs no torch._dynamo import: torch.optim
    would add 2.3 s to every training process."""
    script = (
        "import sys, numpy as np\n"
        "from rnnopt.train.steppers import STEPPERS\n"
        "from rnnopt.train.heads import head_loss, init_head\n"
        "from rnnopt import get_variant\n"
        "from rnnopt.models.params import init_params\n"
        "variant = get_variant('torch-lstm-nn', dtype='float32')\n"
        "layer = init_params('lstm', 4, 5, seed=0)\n"
        "loss = head_loss({'loss': 'mse_last', 'output_size': 1})\n"
        "stepper = STEPPERS['torch'](variant, layer, init_head(5, 1, 0), loss, 'adam',\n"
        "                            {'lr': 0.01}, 1.0)\n"
        "x = np.random.default_rng(0).normal(size=(2, 3, 4))\n"
        "batch = stepper.to_native(x, np.ones((2, 1)), np.full(2, 3))\n"
        "stepper.step([batch], 1.0)\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    assert fresh_python(script) == ["False"]


def test_optimizer_updates_in_place_and_keeps_dtype():
    params = {k: v.astype(np.float32) for k, v in random_arrays(0).items()}
    originals = {k: v for k, v in params.items()}
    make_optimizer("adam", params, lr=0.1).step(random_arrays(1))
    for key, value in params.items():
        assert value is originals[key] and value.dtype == np.float32


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
