"""One optimiser step of layer + head + loss, per framework, behind one interface.

A stepper owns the model state in the variant's native form. `to_native` converts one
micro-batch (numpy float64 slices of the dataset) outside any timed region; `step` runs
forward, loss, backward over the micro-batches, accumulating gradients, then measures the global
gradient norm (clipping it when asked) and updates every parameter, layer and head alike.
`train.py` picks the stepper through `STEPPERS[variant.framework]`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rnnopt.models.params import param_names
from rnnopt.train.heads import HEAD_NAMES, HeadLoss
from rnnopt.train.optim import clip_grad_norm, global_norm, make_optimizer


@dataclass
class StepOutcome:
    """loss: the step's loss (mean over all micro-batches); grad_norm: before clipping;
    update_skipped: the float16 GradScaler dropped this update (inf/NaN gradients)."""

    loss: float
    grad_norm: float
    update_skipped: bool = False


class NumpyStepper:
    """Layer through the variant's forward_train/backward; head, loss and optimiser in numpy,
    all in the variant's dtype."""

    def __init__(self, variant, layer, head, loss: HeadLoss, optimizer: str, hyper: dict, clip):
        self.variant, self.loss, self.clip_norm = variant, loss, clip
        self.params = {**variant.cast_params(layer), **{n: variant.cast(head[n]) for n in head}}
        self.layer = {name: self.params[name] for name in param_names(variant.cell)}
        self.head = {name: self.params[name] for name in HEAD_NAMES}
        self.grads = {name: np.zeros_like(p) for name, p in self.params.items()}
        self.optimizer = make_optimizer(optimizer, self.params, **hyper)
        self.grad_y = np.empty(0)  # reused upstream-gradient buffer: no allocation per step

    def inputs(self, x: np.ndarray) -> np.ndarray:
        """x (B, T, I) float64 in the variant's dtype."""
        return self.variant.cast(x)

    def to_native(self, x: np.ndarray, target: np.ndarray, lengths: np.ndarray):
        rows, cols = self.loss.positions(lengths, x.shape[1])
        targets = self.loss.targets(target, rows, cols)
        if targets.dtype.kind == "f":  # class indices stay int64
            targets = self.variant.cast(targets)
        return self.inputs(x), targets, rows, cols

    def step(self, micro_batches, normalizer: float) -> StepOutcome:
        with np.errstate(over="ignore", invalid="ignore"):  # divergence is detected, not warned
            return self._step(micro_batches, normalizer)

    def _step(self, micro_batches, normalizer: float) -> StepOutcome:
        loss = 0.0
        for index, (x, target, rows, cols) in enumerate(micro_batches):
            y, cache = self.variant.forward_train(self.layer, x)
            if self.grad_y.shape != y.shape:
                self.grad_y = np.empty_like(y)
            part, grad_y, head_grads = self.loss.numpy_step(
                y, self.head, target, rows, cols, normalizer, self.grad_y
            )
            layer_grads = self.variant.backward(self.layer, cache, grad_y)
            # variants may hand out workspace views: copy before the next micro-batch reuses them
            for name, total in self.grads.items():
                grad = head_grads[name] if name in head_grads else layer_grads[name]
                if index == 0:
                    np.copyto(total, grad)
                else:
                    total += grad
            loss += part
        if self.clip_norm is None:
            grad_norm = global_norm(self.grads)
        else:
            grad_norm = clip_grad_norm(self.grads, self.clip_norm)
        self.optimizer.step(self.grads)
        return StepOutcome(loss, grad_norm)

    def outputs(self, x, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """Float64 head outputs (M, O) at the read positions (numpy int64), no gradients."""
        y, _ = self.variant.forward_train(self.layer, x)
        h = y[rows, cols]
        return np.asarray(h @ self.head["head_weight"].T + self.head["head_bias"], np.float64)

    def sync(self) -> None:
        return None

    def memory(self) -> dict[str, float]:
        return {}


class TorchStepper:
    """variant.module + nn.Linear head, autograd, torch.optim's update rules
    (rnnopt.train.torch_optim), clip_grad_norm_; autocast and, for float16 (CUDA), a GradScaler
    whose scale is undone before the norm is taken."""

    def __init__(self, variant, layer, head, loss: HeadLoss, optimizer: str, hyper: dict, clip):
        import torch

        from rnnopt.train.torch_optim import make_torch_optimizer

        self.torch, self.variant, self.loss, self.clip_norm = torch, variant, loss, clip
        self.device = torch.device(variant.device)
        self.module = variant.module(layer)
        output_size, hidden_size = head["head_weight"].shape
        self.head = torch.nn.Linear(hidden_size, output_size)
        self.head.to(self.device, variant.weight_dtype)
        with torch.no_grad():
            self.head.weight.copy_(torch.from_numpy(head["head_weight"]))
            self.head.bias.copy_(torch.from_numpy(head["head_bias"]))
        self.parameters = [*self.module.parameters(), *self.head.parameters()]
        self.optimizer = make_torch_optimizer(optimizer, self.parameters, variant.dtype, **hyper)
        self.scaler = torch.amp.GradScaler(variant.device, enabled=variant.dtype == "float16")
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)

    def inputs(self, x: np.ndarray):
        """x (B, T, I) float64 as a tensor of the variant's dtype on its device."""
        return self.variant.tensor(x)

    def _index(self, array: np.ndarray):
        return self.torch.from_numpy(np.ascontiguousarray(array, dtype=np.int64)).to(self.device)

    def to_native(self, x: np.ndarray, target: np.ndarray, lengths: np.ndarray):
        rows, cols = self.loss.positions(lengths, x.shape[1])
        targets = self.loss.targets(target, rows, cols)
        index = self._index
        targets_t = self.variant.tensor(targets) if targets.dtype.kind == "f" else index(targets)
        return self.inputs(x), targets_t, index(rows), index(cols)

    def step(self, micro_batches, normalizer: float) -> StepOutcome:
        torch = self.torch
        self.optimizer.zero_grad(set_to_none=True)
        losses = []
        for x, target, rows, cols in micro_batches:
            with self.variant.autocast():
                y = self.module(x)
                loss = self.loss.torch_loss(y, self.head, target, rows, cols, normalizer)
            self.scaler.scale(loss).backward()
            losses.append(loss.detach().double())
        self.scaler.unscale_(self.optimizer)  # no-op unless float16
        if self.clip_norm is None:
            norm = torch.nn.utils.get_total_norm([p.grad for p in self.parameters])
        else:
            norm = torch.nn.utils.clip_grad_norm_(self.parameters, self.clip_norm)
        self.scaler.step(self.optimizer)  # skips the update on inf/NaN gradients (float16)
        self.scaler.update()
        grad_norm = float(norm)
        skipped = self.scaler.is_enabled() and not np.isfinite(grad_norm)
        return StepOutcome(float(torch.stack(losses).sum()), grad_norm, skipped)

    def outputs(self, x, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """Float64 head outputs (M, O) at the read positions (numpy int64), no gradients."""
        rows, cols = self._index(rows), self._index(cols)
        with self.torch.no_grad(), self.variant.autocast():
            out = self.head(self.module(x)[rows, cols])
        return out.detach().to("cpu", self.torch.float64).numpy()

    def sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def memory(self) -> dict[str, float]:
        if self.device.type != "cuda":
            return {}
        return {"cuda_peak_allocated_mb": self.torch.cuda.max_memory_allocated(self.device) / 2**20}


STEPPERS = {"numpy": NumpyStepper, "torch": TorchStepper}
