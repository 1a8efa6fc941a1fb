"""torch.optim's SGD and Adam update rules written with torch's foreach ops.

Constructing any torch.optim optimizer imports torch._dynamo: 2.3 s of wall time on a 2-core
VM, in every torch training process, where 600 steps of torch-lstm-nn take 3.3 s. These
classes apply the same operations in the same order as torch.optim's foreach implementation
(tests hold them to the same bits as torch.optim on CPU), with the hyperparameter names of
rnnopt.train.optim's numpy twins. float16 keeps torch.optim: its GradScaler steps a
torch.optim.Optimizer.
"""

from __future__ import annotations

import torch

from rnnopt.errors import UserError
from rnnopt.train.optim import AdamRule, SGDRule


class ForeachOptimizer:
    """The parameters and `zero_grad` every update rule below shares."""

    def __init__(self, parameters):
        self.parameters = list(parameters)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.parameters:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    def _with_grads(self) -> tuple[list[int], list, list]:
        """Indices, parameters and gradients of the parameters that have a gradient (torch.optim
        skips the others, their state untouched)."""
        indices = [i for i, p in enumerate(self.parameters) if p.grad is not None]
        return (
            indices,
            [self.parameters[i] for i in indices],
            [self.parameters[i].grad for i in indices],
        )


class TorchSGD(ForeachOptimizer, SGDRule):
    """torch.optim.SGD: g = grad + wd * p; buf = g (first step), then momentum * buf +
    (1 - dampening) * g; g = g + momentum * buf (nesterov) or buf; p -= lr * g."""

    def __init__(self, parameters, lr: float, **hyper):
        ForeachOptimizer.__init__(self, parameters)
        SGDRule.__init__(self, lr, **hyper)
        self.momentum_buffers: dict[int, torch.Tensor] = {}

    @torch.no_grad()
    def step(self) -> None:
        indices, params, grads = self._with_grads()
        if not params:
            return
        if self.weight_decay:
            grads = torch._foreach_add(grads, params, alpha=self.weight_decay)
        if self.momentum:
            if all(i in self.momentum_buffers for i in indices):
                bufs = [self.momentum_buffers[i] for i in indices]
                torch._foreach_mul_(bufs, self.momentum)
                torch._foreach_add_(bufs, grads, alpha=1 - self.dampening)
            else:  # the first step takes the gradient as is, undamped
                bufs = []
                for i, g in zip(indices, grads, strict=True):
                    buf = self.momentum_buffers.get(i)
                    if buf is None:
                        buf = self.momentum_buffers[i] = torch.clone(g).detach()
                    else:
                        buf.mul_(self.momentum).add_(g, alpha=1 - self.dampening)
                    bufs.append(buf)
            grads = torch._foreach_add(grads, bufs, alpha=self.momentum) if self.nesterov else bufs
        torch._foreach_add_(params, grads, alpha=-self.lr)


class TorchAdam(ForeachOptimizer, AdamRule):
    """torch.optim.Adam (L2 weight decay added to the gradient, no amsgrad):
    m = lerp(m, g, 1 - beta1); v = beta2 v + (1 - beta2) g^2;
    p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)."""

    def __init__(self, parameters, lr: float, **hyper):
        ForeachOptimizer.__init__(self, parameters)
        AdamRule.__init__(self, lr, **hyper)
        self.steps: dict[int, int] = {}
        self.exp_avg: dict[int, torch.Tensor] = {}
        self.exp_avg_sq: dict[int, torch.Tensor] = {}

    @torch.no_grad()
    def step(self) -> None:
        indices, params, grads = self._with_grads()
        if not params:
            return
        beta1, beta2 = self.betas
        for i, p in zip(indices, params, strict=True):
            if i not in self.steps:
                self.steps[i] = 0
                self.exp_avg[i] = torch.zeros_like(p, memory_format=torch.preserve_format)
                self.exp_avg_sq[i] = torch.zeros_like(p, memory_format=torch.preserve_format)
            self.steps[i] += 1
        exp_avgs = [self.exp_avg[i] for i in indices]
        exp_avg_sqs = [self.exp_avg_sq[i] for i in indices]
        if self.weight_decay:
            grads = torch._foreach_add(grads, params, alpha=self.weight_decay)
        torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2)
        # torch counts steps in a float tensor and reads them back as Python floats
        steps = [float(self.steps[i]) for i in indices]
        step_sizes = [-(self.lr / (1 - beta1**t)) for t in steps]
        bias_correction2_sqrt = [(1 - beta2**t) ** 0.5 for t in steps]
        denominators = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_div_(denominators, bias_correction2_sqrt)
        torch._foreach_add_(denominators, self.eps)
        torch._foreach_addcdiv_(params, exp_avgs, denominators, step_sizes)


FOREACH_OPTIMIZERS = {"sgd": TorchSGD, "adam": TorchAdam}


def make_torch_optimizer(name: str, parameters, dtype: str, **hyper):
    """SGD or Adam over torch `parameters`, hyper as in torch.optim: the foreach classes above,
    torch.optim itself for float16 (GradScaler)."""
    if name not in FOREACH_OPTIMIZERS:
        raise UserError(f"unknown optimizer {name!r}; choose from {', '.join(FOREACH_OPTIMIZERS)}")
    if dtype == "float16":
        classes = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam}
        return classes[name](parameters, **hyper)
    return FOREACH_OPTIMIZERS[name](parameters, **hyper)
