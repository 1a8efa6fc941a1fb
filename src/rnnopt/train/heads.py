"""What every trained model puts on top of its recurrent layer: a linear head and the task's loss.

The dataset manifest names the loss; each is a readout (which hidden states the head reads)
and a criterion:

- mse_last:   the state at step lengths[n] - 1, squared error against target (N, O).
- mse_steps:  every valid step t < lengths[n], squared error against target (N, T, O).
- xent_steps: every valid step, cross-entropy against class targets (N, T) int64.

A loss is a sum over the read positions divided by a `normalizer` counted over the whole
optimiser step (all micro-batches), so k micro-batches of b sequences give exactly the loss
and gradients of one batch of k * b, variable lengths included. The normalizer makes every
loss the mean torch's reduction="mean" would take over the full batch.

Numpy maths runs in the arrays' dtype (the variant's); torch maths in the autocast policy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rnnopt.errors import UserError
from rnnopt.train.data import valid_step_mask

HEAD_NAMES = ("head_weight", "head_bias")
HEAD_SEED_STREAM = 1  # head weights come from default_rng((seed, 1)), apart from the batches


def init_head(hidden_size: int, output_size: int, seed: int) -> dict[str, np.ndarray]:
    """Float64 head_weight (O, H) and head_bias (O,) ~ U(-1/sqrt(H), 1/sqrt(H)), as nn.Linear."""
    rng = np.random.default_rng((seed, HEAD_SEED_STREAM))
    bound = 1.0 / np.sqrt(hidden_size)
    return {
        "head_weight": rng.uniform(-bound, bound, size=(output_size, hidden_size)),
        "head_bias": rng.uniform(-bound, bound, size=(output_size,)),
    }


def read_positions(readout: str, lengths: np.ndarray, seq_len: int):
    """(rows, cols) int64 of the hidden states the head reads, in row-major order."""
    if readout == "last":
        return np.arange(len(lengths)), np.asarray(lengths) - 1
    return np.nonzero(valid_step_mask(lengths, seq_len))


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


@dataclass(frozen=True)
class HeadLoss:
    """The task's loss; `output_size` O; `scored_classes`: classes the copy accuracy counts."""

    name: str
    readout: str  # "last" | "steps"
    criterion: str  # "mse" | "xent"
    output_size: int
    scored_classes: int | None = None

    @property
    def metric_name(self) -> str:
        return "mse" if self.criterion == "mse" else "copy_accuracy"

    def positions(self, lengths: np.ndarray, seq_len: int):
        return read_positions(self.readout, lengths, seq_len)

    def targets(self, target: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """The targets of the read positions: (M, O) for mse, (M,) classes for xent."""
        return target[rows] if self.readout == "last" else target[rows, cols]

    def normalizer(self, lengths: np.ndarray, seq_len: int) -> int:
        """How many terms the mean over these sequences takes (positions, times O for mse)."""
        positions = len(self.positions(lengths, seq_len)[0])
        return positions * (self.output_size if self.criterion == "mse" else 1)

    # -------------------------------------------------------------- numpy

    def numpy_loss(self, outputs: np.ndarray, targets: np.ndarray, normalizer: float):
        """(loss, d loss / d outputs) for head outputs (M, O) in their own dtype."""
        scale = outputs.dtype.type(1.0 / normalizer)
        if self.criterion == "mse":
            diff = outputs - targets
            return float(np.sum(diff * diff)) / normalizer, (2 * scale) * diff
        log_probs = _log_softmax(outputs)
        picked = np.arange(len(targets)), targets
        grad = np.exp(log_probs)
        grad[picked] -= 1
        return -float(np.sum(log_probs[picked])) / normalizer, grad * scale

    def numpy_step(self, y, head, target, rows, cols, normalizer, grad_y=None):
        """Loss, grad_y (B, T, H) and head gradients for hidden states y (B, T, H).

        `target` holds this micro-batch's targets already selected by `targets` and cast;
        `grad_y`, if given, is a buffer shaped like y to reuse (zeroed here).
        """
        weight, bias = head["head_weight"], head["head_bias"]
        h = y[rows, cols]  # (M, H)
        loss, grad_out = self.numpy_loss(h @ weight.T + bias, target, normalizer)
        if grad_y is None:
            grad_y = np.zeros_like(y)
        else:
            grad_y.fill(0)
        grad_y[rows, cols] = grad_out @ weight
        grads = {"head_weight": grad_out.T @ h, "head_bias": grad_out.sum(axis=0)}
        return loss, grad_y, grads

    # -------------------------------------------------------------- torch

    def torch_loss(self, y, head, target, rows, cols, normalizer: float):
        """The same loss on torch tensors; differentiable through y and the nn.Linear head."""
        import torch.nn.functional as F

        outputs = head(y[rows, cols])
        if self.criterion == "mse":
            return F.mse_loss(outputs, target.to(outputs.dtype), reduction="sum") / normalizer
        return F.cross_entropy(outputs, target, reduction="sum") / normalizer

    # -------------------------------------------------------------- evaluation

    def evaluate(self, outputs: np.ndarray, targets: np.ndarray) -> tuple[float, float, int]:
        """(loss sum, metric sum, metric count) in float64 for head outputs (M, O).

        The metric is the MSE for regression, and for classification the accuracy over the
        positions whose target is one of the first `scored_classes` (the copied symbols).
        """
        outputs = np.asarray(outputs, dtype=np.float64)
        if self.criterion == "mse":
            squared = float(np.sum((outputs - targets) ** 2))
            return squared, squared, targets.size
        log_probs = _log_softmax(outputs)
        loss_sum = -float(np.sum(log_probs[np.arange(len(targets)), targets]))
        scored = targets < (self.scored_classes or self.output_size)
        correct = int(np.sum(outputs.argmax(axis=1)[scored] == targets[scored]))
        return loss_sum, float(correct), int(scored.sum())

    def constant_baseline(self, fit_targets: np.ndarray, targets: np.ndarray) -> float:
        """Mean loss over `targets` of the best constant prediction for `fit_targets`.

        Both as HeadLoss.targets selects them. mse: the fitted mean (per output); xent: the class
        frequencies of fit_targets, counted from 1 (Laplace) so that no held-out class gets
        probability 0.
        """
        if self.criterion == "mse":
            mean = np.mean(fit_targets, axis=0)
            return float(np.mean((np.asarray(targets, np.float64) - mean) ** 2))
        counts = np.bincount(fit_targets, minlength=self.output_size) + 1.0
        return -float(np.mean(np.log(counts / counts.sum())[targets]))


_LOSSES = {
    "mse_last": ("last", "mse"),
    "mse_steps": ("steps", "mse"),
    "xent_steps": ("steps", "xent"),
}


def head_loss(manifest: dict) -> HeadLoss:
    """The HeadLoss a dataset manifest asks for (its `loss`, `output_size`, parameters)."""
    name = manifest["loss"]
    if name not in _LOSSES:
        raise UserError(f"unknown loss {name!r} in the manifest; choose from {', '.join(_LOSSES)}")
    readout, criterion = _LOSSES[name]
    scored = manifest.get("parameters", {}).get("n_symbols") if criterion == "xent" else None
    return HeadLoss(name, readout, criterion, int(manifest["output_size"]), scored)
