"""Training loop: one recurrent layer + linear head + the task's loss, the same for every variant.

Every variant starts from the same float64 weights (`init_params` for the layer, `init_head`
for the head) and sees the same batches: each epoch a fresh permutation of the training split
drawn from `np.random.default_rng(seed)`, cut into optimiser steps of `batch * accumulate`
sequences, each split into `accumulate` micro-batches of `batch`. Variant differences live in
the variants and in the per-framework steppers (`rnnopt.train.steppers`), never here.

Held-out split: the last round(holdout_fraction * N) sequences of the dataset (at least one),
never trained on. The sequences of a dataset are independent draws, so its tail is as random
as any subset, and the split is the same for every variant, setting and seed. The held-out loss
is measured before the first step, every `eval_every` steps and after the last, next to the
predict-the-mean baseline of the split: the loss of the constant prediction fitted to the
training split's targets (heads.HeadLoss.constant_baseline).

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
from rnnopt.models.params import init_params
from rnnopt.records import fast_ms
from rnnopt.train.heads import head_loss, init_head
from rnnopt.train.optim import clipping_fires
from rnnopt.train.steppers import STEPPERS

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
    holdout_fraction: float = 0.2  # the last sequences of the dataset, never trained on
    eval_every: int = 50  # optimiser steps between held-out evaluations

    def check(self, n_sequences: int) -> None:
        """UserError naming the first bad setting, or a training split too small for one step."""
        for key in ("steps", "batch", "hidden_size", "accumulate", "eval_every"):
            if getattr(self, key) < 1:
                raise UserError(f"{key} must be >= 1; got {getattr(self, key)}")
        if not self.lr > 0 or (self.clip_norm is not None and not self.clip_norm > 0):
            raise UserError(f"lr and clip_norm must be > 0; got {self.lr}, {self.clip_norm}")
        if self.optimizer == "adam" and self.momentum:
            raise UserError("momentum applies to --optimizer sgd only; adam uses betas")
        if not 0 < self.holdout_fraction < 1:
            raise UserError(f"holdout_fraction must be in (0, 1); got {self.holdout_fraction}")
        training, heldout = holdout_split(n_sequences, self.holdout_fraction)
        if len(training) < self.batch * self.accumulate:
            raise UserError(
                f"the training split holds {len(training)} sequences (the last {len(heldout)} "
                f"of {n_sequences} are held out), fewer than batch * accumulate = "
                f"{self.batch * self.accumulate}"
            )

    def optimizer_hyper(self) -> dict:
        hyper = {"lr": self.lr, "weight_decay": self.weight_decay}
        return {**hyper, "momentum": self.momentum} if self.optimizer == "sgd" else hyper


@dataclass
class TrainResult:
    """status ok | diverged; series: per-step and per-evaluation curves; metrics: the numbers."""

    status: str
    reason: str | None
    metrics: dict
    series: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def holdout_split(n_sequences: int, fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """(training, held-out) int64 indices: the held-out split is the last round(fraction * N)
    sequences, at least one (empty training split if N == 1: TrainConfig.check says so)."""
    heldout = min(max(round(n_sequences * fraction), 1), n_sequences)
    return np.arange(n_sequences - heldout), np.arange(n_sequences - heldout, n_sequences)


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
    """Train `variant` on the training split of `dataset` (rnnopt.train.data.Dataset).

    Returns the loss and gradient-norm curves, timing, the held-out loss curve and the final
    held-out loss and metric. Exceptions of the variant propagate to the caller;
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
    training, heldout = holdout_split(len(dataset.x), config.holdout_fraction)
    evaluator = HeldOut(stepper, dataset, heldout, config.batch)
    show = sys.stderr.isatty() if progress is None else progress
    curves, reason, skipped_updates = _run_steps(
        stepper, dataset, len(training), evaluator, config, show
    )
    tokens_per_step = config.batch * config.accumulate * seq_len
    metrics = _step_metrics(curves, tokens_per_step, dataset.manifest)
    metrics["skipped_updates"] = skipped_updates
    metrics["training_sequences"], metrics["heldout_sequences"] = len(training), len(heldout)
    metrics["heldout_baseline_loss"] = heldout_baseline(loss_fn, dataset, training, heldout)
    notes = [
        f"held-out split: the last {len(heldout)} of {len(dataset.x)} sequences, never trained "
        "on; heldout_baseline_loss: the constant prediction fitted to the training split"
    ]
    if reason is None:
        final = curves["heldout_loss"][-1], curves["heldout_metric"][-1]
        metrics["heldout_loss"], metrics["final_metric"] = final
        metrics[f"final_{loss_fn.metric_name}"] = final[1]
        if metrics["heldout_baseline_loss"] > 0:  # 0 only for constant targets
            metrics["heldout_loss_ratio"] = final[0] / metrics["heldout_baseline_loss"]
        notes.append(f"final_metric = final_{loss_fn.metric_name} on the held-out split")
    del curves["heldout_metric"]
    metrics["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    metrics.update(stepper.memory())
    status = "ok" if reason is None else "diverged"
    return TrainResult(status, reason, metrics, curves, notes)


def _run_steps(stepper, dataset, n_training: int, evaluator, config: TrainConfig, show: bool):
    """The optimiser steps on the first n_training sequences, the held-out loss every
    eval_every of them: (curves, divergence reason or None, updates the scaler skipped)."""
    curves = {"loss": [], "grad_norm": [], "clipped": [], "step_time_ms": []}
    curves |= {"eval_step": [], "heldout_loss": [], "heldout_metric": []}

    def evaluate(steps_done: int) -> None:
        loss, metric = evaluator.evaluate()
        curves["eval_step"].append(steps_done)
        curves["heldout_loss"].append(loss)
        curves["heldout_metric"].append(metric)

    skipped_updates = 0
    per_step = config.batch * config.accumulate
    schedule = batch_schedule(n_training, per_step, config.steps, config.seed)
    evaluate(0)
    for step, indices in enumerate(tqdm(schedule, total=config.steps, disable=not show)):
        micro_batches = [
            stepper.to_native(*(array[part] for array in dataset_arrays(dataset)))
            for part in np.split(indices, config.accumulate)
        ]
        normalizer = stepper.loss.normalizer(dataset.lengths[indices], dataset.x.shape[1])
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
        if (step + 1) % config.eval_every == 0 or step + 1 == config.steps:
            evaluate(step + 1)
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
    """Timing over the steps after WARMUP_STEPS (their median, and their 10th percentile);
    tokens count padded steps too (B * T)."""
    times = curves["step_time_ms"]
    timed = times[WARMUP_STEPS:] or times
    median_ms = float(np.median(timed)) if timed else None
    return {
        "final_loss": curves["loss"][-1] if curves["loss"] else None,
        "baseline_loss": manifest.get("baseline_loss"),
        "steps_completed": len(times),
        "time_per_step_ms": median_ms,
        # the fast steps (records.fast_ms), what the training speed comparisons divide: the
        # median moved 0.91-1.25 ms a step for one job in four fresh runs, this 0.89-0.91
        "time_per_step_q10_ms": fast_ms(timed) if timed else None,
        "first_step_ms": times[0] if times else None,
        "tokens_per_s": tokens_per_step / (median_ms / 1e3) if median_ms else None,
        "clip_fraction": float(np.mean(curves["clipped"])) if times else 0.0,
    }


class HeldOut:
    """Loss and task metric (float64) of the model over the held-out split, forward only.

    Batches of the training micro-batch size only: a new batch size would make compiling
    variants compile again and preallocating ones reallocate. The last batch is filled up
    with held-out sequences already counted, whose outputs are not scored.
    """

    def __init__(self, stepper, dataset, heldout: np.ndarray, batch: int):
        self.stepper, self.loss = stepper, stepper.loss
        self.seq_len = dataset.x.shape[1]
        self.batches = []
        for start in range(0, len(heldout), batch):
            scored = heldout[start : start + batch]
            filled = np.resize(heldout, batch) if len(scored) < batch else scored
            filled[: len(scored)] = scored
            x, target, lengths = (array[scored] for array in dataset_arrays(dataset))
            rows, cols = self.loss.positions(lengths, self.seq_len)
            targets = self.loss.targets(target, rows, cols)
            self.batches.append((stepper.inputs(dataset.x[filled]), rows, cols, targets))
        self.normalizer = self.loss.normalizer(dataset.lengths[heldout], self.seq_len)

    def evaluate(self) -> tuple[float, float | None]:
        """(mean loss, metric) over the held-out split, as the training loss averages."""
        loss_sum = metric_sum = 0.0
        metric_terms = 0
        for x_native, rows, cols, targets in self.batches:
            outputs = self.stepper.outputs(x_native, rows, cols)
            losses, metric, terms = self.loss.evaluate(outputs, targets)
            loss_sum += losses
            metric_sum += metric
            metric_terms += terms
        return loss_sum / self.normalizer, metric_sum / metric_terms if metric_terms else None


def heldout_baseline(loss_fn, dataset, training: np.ndarray, heldout: np.ndarray) -> float:
    """Loss on the held-out split of the best constant prediction on the training split."""
    seq_len = dataset.x.shape[1]

    def targets(indices):
        rows, cols = loss_fn.positions(dataset.lengths[indices], seq_len)
        return loss_fn.targets(dataset.target[indices], rows, cols)

    return loss_fn.constant_baseline(targets(training), targets(heldout))


def dataset_arrays(dataset) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x, target, lengths: the arrays a stepper prepares, sliced alike."""
    return dataset.x, dataset.target, dataset.lengths
