"""Numpy optimisers with exactly torch.optim's update rules, and global-norm gradient clipping.

The numpy variants train with these, the torch variants with rnnopt.train.torch_optim (the
same rules as torch foreach ops), so the two frameworks follow the same trajectory from the same
start. Parameters and gradients are dicts of arrays in the variant's dtype; `step` updates the
parameter arrays in place (the variants hold on to them), and optimiser state has the
parameters' dtype, as in torch.
"""

from __future__ import annotations

import math

import numpy as np

from rnnopt.errors import UserError

Arrays = dict[str, np.ndarray]
CLIP_EPS = 1e-6  # torch.nn.utils.clip_grad_norm_: scale = max_norm / (total_norm + 1e-6)


class SGDRule:
    """torch.optim.SGD's hyperparameters, refused where torch refuses them; the numpy and torch
    foreach implementations share them."""

    def __init__(
        self,
        lr: float,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
    ):
        if nesterov and (momentum <= 0 or dampening != 0):
            raise UserError("SGD nesterov needs momentum > 0 and dampening = 0")
        self.lr, self.momentum, self.dampening = lr, momentum, dampening
        self.weight_decay, self.nesterov = weight_decay, nesterov


class AdamRule:
    """torch.optim.Adam's hyperparameters (no amsgrad), shared as SGDRule's."""

    def __init__(
        self,
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ):
        self.lr, self.betas, self.eps, self.weight_decay = lr, betas, eps, weight_decay


class SGD(SGDRule):
    """torch.optim.SGD: g = grad + wd * p; buf = g, then momentum * buf + (1 - dampening) * g;
    g = g + momentum * buf (nesterov) or buf; p -= lr * g."""

    def __init__(self, params: Arrays, lr: float, **hyper):
        super().__init__(lr, **hyper)
        self.params = params
        self.momentum_buffers: Arrays = {}

    def step(self, grads: Arrays) -> None:
        for name, p in self.params.items():
            g = grads[name]
            if self.weight_decay:
                g = g + self.weight_decay * p
            if self.momentum:
                buf = self.momentum_buffers.get(name)
                if buf is None:  # the first step takes the gradient as is, undamped
                    buf = self.momentum_buffers[name] = g.copy()
                else:
                    buf *= self.momentum
                    buf += (1.0 - self.dampening) * g
                g = g + self.momentum * buf if self.nesterov else buf
            p -= self.lr * g


class Adam(AdamRule):
    """torch.optim.Adam (L2 weight decay added to the gradient, no amsgrad):
    m = lerp(m, g, 1 - beta1); v = beta2 v + (1 - beta2) g^2;
    p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)."""

    def __init__(self, params: Arrays, lr: float, **hyper):
        super().__init__(lr, **hyper)
        self.params = params
        self.steps = 0
        self.exp_avg = {name: np.zeros_like(p) for name, p in params.items()}
        self.exp_avg_sq = {name: np.zeros_like(p) for name, p in params.items()}

    def step(self, grads: Arrays) -> None:
        beta1, beta2 = self.betas
        self.steps += 1
        step_size = self.lr / (1.0 - beta1**self.steps)
        bias_correction2_sqrt = math.sqrt(1.0 - beta2**self.steps)
        for name, p in self.params.items():
            g = grads[name]
            if self.weight_decay:
                g = g + self.weight_decay * p
            m, v = self.exp_avg[name], self.exp_avg_sq[name]
            m += (1.0 - beta1) * (g - m)  # torch's lerp_: m + w * (g - m)
            v *= beta2
            v += (1.0 - beta2) * g * g
            denom = np.sqrt(v) / bias_correction2_sqrt + self.eps
            p -= step_size * (m / denom)


OPTIMIZERS = {"sgd": SGD, "adam": Adam}


def make_optimizer(name: str, params: Arrays, **hyper) -> SGD | Adam:
    """The numpy optimiser `name` (sgd, adam) over `params`; hyper as in torch.optim."""
    if name not in OPTIMIZERS:
        raise UserError(f"unknown optimizer {name!r}; choose from {', '.join(OPTIMIZERS)}")
    return OPTIMIZERS[name](params, **hyper)


def global_norm(grads: Arrays) -> float:
    """L2 norm over all arrays together, as torch: the norm of the per-array norms."""
    norms = [np.linalg.norm(g.ravel()) for g in grads.values()]
    return float(np.linalg.norm(np.array(norms, dtype=np.result_type(*grads.values()))))


def clip_grad_norm(grads: Arrays, max_norm: float) -> float:
    """torch.nn.utils.clip_grad_norm_ on numpy arrays, in place; returns the norm before.

    scale = max_norm / (total_norm + 1e-6), applied only when it is below 1. A non-finite
    norm leaves the gradients alone (the caller stops the run as diverged).
    """
    total_norm = global_norm(grads)
    if clipping_fires(total_norm, max_norm):
        scale = max_norm / (total_norm + CLIP_EPS)
        for g in grads.values():
            g *= g.dtype.type(scale)
    return total_norm


def clipping_fires(total_norm: float, max_norm: float | None) -> bool:
    """Whether clip_grad_norm_ scales the gradients: max_norm / (norm + 1e-6) < 1 (not NaN)."""
    return max_norm is not None and max_norm / (total_norm + CLIP_EPS) < 1.0
