"""Training loop: one recurrent layer + linear head + the task's loss, the same for every variant.

Every variant starts from the same float64 weights (`init_params` for the layer, `init_head`
for the head) and sees the same batches: each epoch a fresh permutation of the dataset drawn
from `np.random.default_rng(seed)`, cut into optimiser steps of `batch * accumulate`
sequences, each split into `accumulate` micro-batches of `batch`. Variant differences live in
the variants and in the per-framework steppers (`rnnopt.steppers`), never here.

A non-finite loss or gradient norm ends the run as `diverged`, keeping the curves so far.
"""

from __future__ import annotations

import math
import resource
import sys
import time
from dataclasses import dataclass, field

import numpy as np
from tqdm import tqdm

from rnnopt.errors import UserError
from rnnopt.heads import head_loss, init_head
from rnnopt.optim import clipping_fires
from rnnopt.params import init_params
from rnnopt.steppers import STEPPERS

WARMUP_STEPS = 3  # left out of time_per_step_ms: first calls allocate, compile, warm caches


@dataclass
class TrainConfig:
    """Settings of one run. `batch` is the micro-batch; a step consumes batch * accumulate."""

    steps: int
    batch: int
    hidden_size: int
    optimizer: str = "sgd"
    lr: float = 0.01
    momentum: float = 0.0
    weight_decay: float = 0.0
    clip_norm: float | None = None
    accumulate: int = 1
    seed: int = 0
    eval_sequences: int = 256  # the first sequences of the dataset, for the final metric

    def check(self, n_sequences: int) -> None:
        """UserError naming the first bad setting, or a dataset too small for one step."""
        for key in ("steps", "batch", "hidden_size", "accumulate", "eval_sequences"):
            if getattr(self, key) < 1:
                raise UserError(f"{key} must be >= 1; got {getattr(self, key)}")
        if not self.lr > 0 or (self.clip_norm is not None and not self.clip_norm > 0):
            raise UserError(f"lr and clip_norm must be > 0; got {self.lr}, {self.clip_norm}")
        if self.optimizer == "adam" and self.momentum:
            raise UserError("momentum applies to --optimizer sgd only; adam uses betas")
        if n_sequences < self.batch * self.accumulate:
            raise UserError(
                f"the dataset holds {n_sequences} sequences, fewer than batch * accumulate = "
                f"{self.batch * self.accumulate}"
            )

    def optimizer_hyper(self) -> dict:
        hyper = {"lr": self.lr, "weight_decay": self.weight_decay}
        return {**hyper, "momentum": self.momentum} if self.optimizer == "sgd" else hyper


@dataclass
class TrainResult:
    """status ok | diverged; series: per-step curves; metrics: the record's numbers."""

    status: str
    reason: str | None
    metrics: dict
    series: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def batch_schedule(n_sequences: int, per_step: int, steps: int, seed: int):
    """Index arrays (per_step,) of each step: a new permutation every epoch, last part dropped."""
    steps_per_epoch = n_sequences // per_step  # >= 1: TrainConfig.check
    rng = np.random.default_rng(seed)
    for step in range(steps):
        position = step % steps_per_epoch
        if position == 0:
            order = rng.permutation(n_sequences)
        yield order[position * per_step : (position + 1) * per_step]


def train(variant, dataset, config: TrainConfig, progress: bool | None = None) -> TrainResult:
    """Train `variant` on `dataset` (rnnopt.data.Dataset) for config.steps steps.

    Returns the loss and gradient-norm curves, timing, and the final metric on the first
    config.eval_sequences sequences. Exceptions of the variant propagate to the caller;
    progress: a tqdm bar on stderr (default: when stderr is a terminal).
    """
    config.check(len(dataset.x))
    loss_fn = head_loss(dataset.manifest)
    _, seq_len, input_size = dataset.x.shape
    layer = init_params(variant.cell, input_size, config.hidden_size, config.seed)
    head = init_head(config.hidden_size, loss_fn.output_size, config.seed)
    stepper = STEPPERS[variant.framework](
        variant, layer, head, loss_fn, config.optimizer, config.optimizer_hyper(), config.clip_norm
    )
    show = sys.stderr.isatty() if progress is None else progress
    curves, reason, skipped_updates = _run_steps(stepper, dataset, loss_fn, config, show)
    tokens_per_step = config.batch * config.accumulate * seq_len
    metrics = _step_metrics(curves, tokens_per_step, dataset.manifest)
    metrics["skipped_updates"] = skipped_updates
    notes = []
    if reason is None:
        metrics.update(evaluate(stepper, dataset, loss_fn, config))
        notes.append(
            f"final_metric = final_{loss_fn.metric_name} on the first "
            f"{metrics['eval_sequences']} sequences after training"
        )
    metrics["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    metrics.update(stepper.memory())
    status = "ok" if reason is None else "diverged"
    return TrainResult(status, reason, metrics, curves, notes)


def _run_steps(stepper, dataset, loss_fn, config: TrainConfig, show: bool):
    """The optimiser steps: (curves, divergence reason or None, updates the scaler skipped)."""
    curves = {"loss": [], "grad_norm": [], "clipped": [], "step_time_ms": []}
    skipped_updates = 0
    per_step = config.batch * config.accumulate
    schedule = batch_schedule(len(dataset.x), per_step, config.steps, config.seed)
    for step, indices in enumerate(tqdm(schedule, total=config.steps, disable=not show)):
        micro_batches = [
            stepper.prepare(*(array[part] for array in dataset_arrays(dataset)))
            for part in np.split(indices, config.accumulate)
        ]
        normalizer = loss_fn.normalizer(dataset.lengths[indices], dataset.x.shape[1])
        start_ns = time.perf_counter_ns()
        outcome = stepper.step(micro_batches, normalizer)
        stepper.sync()
        elapsed_ms = (time.perf_counter_ns() - start_ns) / 1e6
        reason = _divergence(outcome, step)
        if reason:
            return curves, reason, skipped_updates
        skipped_updates += outcome.update_skipped
        curves["loss"].append(outcome.loss)
        curves["grad_norm"].append(outcome.grad_norm)
        curves["clipped"].append(clipping_fires(outcome.grad_norm, config.clip_norm))
        curves["step_time_ms"].append(elapsed_ms)
    return curves, None, skipped_updates


def _divergence(outcome, step: int) -> str | None:
    """Why this step ends the run, or None. A float16 update the GradScaler skipped for inf
    gradients is its normal scale search, not divergence."""
    if not math.isfinite(outcome.loss):
        return f"loss became {outcome.loss} at step {step}"
    if not (math.isfinite(outcome.grad_norm) or outcome.update_skipped):
        return f"gradient norm became {outcome.grad_norm} at step {step}"
    return None


def _step_metrics(curves: dict, tokens_per_step: int, manifest: dict) -> dict:
    """Timing over the steps after WARMUP_STEPS; tokens count padded steps too (B * T)."""
    times = curves["step_time_ms"]
    timed = times[WARMUP_STEPS:] or times
    median_ms = float(np.median(timed)) if timed else None
    return {
        "final_loss": curves["loss"][-1] if curves["loss"] else None,
        "baseline_loss": manifest.get("baseline_loss"),
        "steps_completed": len(times),
        "time_per_step_ms": median_ms,
        "first_step_ms": times[0] if times else None,
        "tokens_per_s": tokens_per_step / (median_ms / 1e3) if median_ms else None,
        "clip_fraction": float(np.mean(curves["clipped"])) if times else 0.0,
    }


def evaluate(stepper, dataset, loss_fn, config: TrainConfig) -> dict:
    """Loss and task metric (float64) over the first eval_sequences sequences, forward only.

    Whole micro-batches only (at least one): a new batch size would make compiling variants
    compile again and preallocating ones reallocate.
    """
    count = max(min(config.eval_sequences, len(dataset.x)) // config.batch, 1) * config.batch
    loss_sum = metric_sum = 0.0
    loss_terms = metric_terms = 0
    for start in range(0, count, config.batch):
        x, target, lengths = (a[start : start + config.batch] for a in dataset_arrays(dataset))
        x_native, _, rows, cols = stepper.prepare(x, target, lengths)
        targets = loss_fn.targets(target, *loss_fn.positions(lengths, x.shape[1]))
        losses, metric, terms = loss_fn.evaluate(stepper.outputs(x_native, rows, cols), targets)
        loss_sum += losses
        metric_sum += metric
        metric_terms += terms
        loss_terms += loss_fn.normalizer(lengths, x.shape[1])
    final_metric = metric_sum / metric_terms if metric_terms else None
    return {
        "eval_sequences": count,
        "final_eval_loss": loss_sum / loss_terms,
        "final_metric": final_metric,
        f"final_{loss_fn.metric_name}": final_metric,
    }


def dataset_arrays(dataset) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x, target, lengths: the arrays a stepper prepares, sliced alike."""
    return dataset.x, dataset.target, dataset.lengths
