"""Variable-length batching three ways, on one dataset, from the same weights.

- padded:   random batches (a permutation drawn from the seed), each padded to the longest
            sequence in it;
- bucketed: batches of length-sorted sequences (a stable sort), each padded to its longest:
            little padding left;
- packed:   the padded batches again, but a library layer (nn.LSTM / nn.RNN) gets them as a
            `PackedSequence` (pack_padded_sequence, enforce_sorted=False) and computes only
            the valid steps; variants without a packed kernel (the NumPy ladder, the torch
            cell loops) run the padded batch and mask: the loss reads valid steps only.

Masking makes padding exact: the layers are causal (a padded step comes after every valid
step of its sequence, so it cannot change them), and the loss and its gradient are zero at
padded steps (rnnopt.train.heads), so no gradient flows back from them. The three ways therefore
compute the same loss and gradient up to rounding, which `run` measures.

An epoch is one optimiser step over the whole dataset: every batch's gradient accumulated
(the normalizer counts the valid terms of the whole dataset, as rnnopt.train.heads documents), then
one update. Its loss is the dataset's loss at the epoch's weights whatever the batching, so the
loss curves of the three ways agree epoch by epoch. The ways run interleaved, epoch by epoch,
so that a drift of the machine's speed affects all three alike.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from rnnopt.measure.harness import guarded
from rnnopt.measure.heap import MIB, tracked
from rnnopt.measure.timing import summarize
from rnnopt.models.flops import Shape, flop_count
from rnnopt.models.params import init_params
from rnnopt.train.heads import head_loss, init_head
from rnnopt.train.steppers import STEPPERS, TorchStepper

WAYS = ("padded", "bucketed", "packed")
WARMUP_EPOCHS = 1  # left out of the epoch time: first calls allocate and warm caches
# The three ways' epoch losses agree when within this relative difference: rounding of sums
# taken in another order (other batch shapes, another kernel), never a padded step leaking in.
LOSS_RTOL = {"float64": 1e-9, "float32": 1e-4, "tfloat32": 5e-3, "bfloat16": 5e-2, "float16": 5e-2}


def batch_plan(lengths: np.ndarray, batch: int, way: str, seed: int) -> list[np.ndarray]:
    """Index arrays of the epoch's batches (the last one may be smaller). padded and packed:
    a permutation of numpy.random.default_rng(seed); bucketed: sorted by length."""
    if way == "bucketed":
        order = np.argsort(lengths, kind="stable")
    else:
        order = np.random.default_rng(seed).permutation(len(lengths))
    return [order[start : start + batch] for start in range(0, len(order), batch)]


def padding_of(lengths: np.ndarray, plan: list[np.ndarray], packed: bool) -> dict:
    """Tokens the epoch computes: valid (sum of lengths) and computed (batch x its longest;
    the valid ones only when packed); padding_fraction = wasted / computed."""
    valid = int(np.sum(lengths))
    computed = valid if packed else int(sum(len(i) * int(lengths[i].max()) for i in plan))
    return {
        "valid_tokens": valid,
        "computed_tokens": computed,
        "padding_fraction": 1.0 - valid / computed,
    }


def epoch_flops(cell: str, computed_tokens: int, input_size: int, hidden_size: int) -> int:
    """Analytic FLOPs of forward + backward over the computed tokens (linear in B*T)."""
    per_token = flop_count(cell, Shape(1, 1, input_size, hidden_size), "step")
    return computed_tokens * (per_token["gemm"] + per_token["elementwise"])


class PackedLayer:
    """y (B, T_max, H) of a library layer fed a PackedSequence: only valid steps computed."""

    def __init__(self, layer):
        from torch.nn.utils.rnn import pad_packed_sequence

        self.layer, self.unpack = layer, pad_packed_sequence

    def __call__(self, packed):
        output, _ = self.layer(packed)
        return self.unpack(output, batch_first=True)[0]

    def parameters(self):
        return self.layer.parameters()


def library_layer(stepper):
    """The nn.RNNBase inside a torch stepper's module, or None (a hand-written loop)."""
    if not isinstance(stepper, TorchStepper):
        return None  # and torch stays unimported in a numpy process
    import torch

    layer = getattr(stepper.module, "layer", None)
    return layer if isinstance(layer, torch.nn.RNNBase) else None


class PackedTorchStepper(TorchStepper):
    """TorchStepper whose micro-batches go to the library layer as PackedSequences."""

    def __init__(self, variant, *args):
        super().__init__(variant, *args)
        self.module = PackedLayer(library_layer(self))

    def to_native(self, x, target, lengths):
        from torch.nn.utils.rnn import pack_padded_sequence

        x_t, target_t, rows, cols = super().to_native(x, target, lengths)
        lengths_cpu = self.torch.from_numpy(np.asarray(lengths, dtype=np.int64))
        packed = pack_padded_sequence(x_t, lengths_cpu, batch_first=True, enforce_sorted=False)
        return packed, target_t, rows, cols


@dataclass
class Way:
    """One way of batching: its stepper (own weights), prepared batches, losses and times."""

    name: str
    stepper: object
    packed: bool
    micro_batches: list
    padding: dict
    losses: list[float] = field(default_factory=list)
    epoch_ms: list[float] = field(default_factory=list)

    def epoch(self, normalizer: float) -> None:
        start = time.perf_counter_ns()
        outcome = self.stepper.step(self.micro_batches, normalizer)
        self.stepper.sync()
        self.epoch_ms.append((time.perf_counter_ns() - start) / 1e6)
        self.losses.append(outcome.loss)


def make_way(name, variant, dataset, batch, hidden_size, optimizer, hyper, seed) -> Way:
    """A fresh stepper from the seed's weights and the way's batches, converted up front."""
    loss_fn = head_loss(dataset.manifest)
    _, _, input_size = dataset.x.shape
    layer = init_params(variant.cell, input_size, hidden_size, seed)
    head = init_head(hidden_size, loss_fn.output_size, seed)
    stepper_args = (variant, layer, head, loss_fn, optimizer, hyper, None)
    stepper = STEPPERS[variant.framework](*stepper_args)
    packed = name == "packed" and library_layer(stepper) is not None
    if packed:
        stepper = PackedTorchStepper(*stepper_args)
    plan = batch_plan(dataset.lengths, batch, name, seed)
    micro_batches = []
    for indices in plan:
        longest = int(dataset.lengths[indices].max())
        x = dataset.x[indices, :longest]
        micro_batches.append(
            stepper.to_native(x, dataset.target[indices], dataset.lengths[indices])
        )
    return Way(name, stepper, packed, micro_batches, padding_of(dataset.lengths, plan, packed))


def run(variant, dataset, batch, hidden_size, epochs, optimizer="adam", hyper=None, seed=0):
    """The three ways, `epochs` epochs each, interleaved; returns the Ways (losses, times)."""
    hyper = hyper or {"lr": 0.01, "weight_decay": 0.0}
    loss_fn = head_loss(dataset.manifest)
    normalizer = loss_fn.normalizer(dataset.lengths, dataset.x.shape[1])
    ways = [
        make_way(name, variant, dataset, batch, hidden_size, optimizer, hyper, seed)
        for name in WAYS
    ]
    with np.errstate(over="ignore", invalid="ignore"):
        for _ in range(epochs):
            for way in ways:
                way.epoch(normalizer)
    return ways


def loss_agreement(ways: list[Way]) -> float:
    """Largest relative difference of any way's epoch loss from the padded way's."""
    reference = np.asarray(ways[0].losses)
    worst = 0.0
    for way in ways[1:]:
        difference = np.abs(np.asarray(way.losses) - reference) / np.abs(reference)
        worst = max(worst, float(np.max(difference)))
    return worst


def timed_epochs_ms(way: Way) -> list[float]:
    return way.epoch_ms[WARMUP_EPOCHS:] or way.epoch_ms


def way_metrics(way: Way, peak_mib: float, cell: str, shape: Shape) -> dict:
    epoch_ms = summarize([round(ms * 1e6) for ms in timed_epochs_ms(way)])
    flops = epoch_flops(cell, way.padding["computed_tokens"], shape.input_size,
                               shape.hidden_size)  # fmt: skip
    return {
        **way.padding,
        "packed_kernel": way.packed,
        "epoch_flops": flops,
        "epoch_ms": epoch_ms,
        "valid_tokens_per_s": way.padding["valid_tokens"] / (epoch_ms["median"] / 1e3),
        "peak_mib": peak_mib,
        "final_loss": way.losses[-1],
    }


def measure(args, variant, dataset) -> tuple[dict, dict, list[str]]:
    """(metrics, series, notes) of the three ways; variant errors surface as VariantFailed."""
    hyper = {"lr": args.lr, "weight_decay": 0.0}
    if args.optimizer == "sgd":
        hyper["momentum"] = 0.0
    ways = guarded(run, variant, dataset, args.batch, args.hidden_size, args.epochs,
                   args.optimizer, hyper, args.seed)  # fmt: skip
    normalizer = head_loss(dataset.manifest).normalizer(dataset.lengths, dataset.x.shape[1])
    shape = Shape(args.batch, args.seq_len, dataset.x.shape[2], args.hidden_size)
    metrics, series = {}, {}
    for way in ways:
        heap, _ = guarded(tracked, lambda way=way: way.stepper.step(way.micro_batches, normalizer))
        metrics[way.name] = way_metrics(way, heap["peak_bytes"] / MIB, variant.cell, shape)
        series[f"loss_{way.name}"] = way.losses
        series[f"epoch_ms_{way.name}"] = way.epoch_ms
    padded_ms = metrics["padded"]["epoch_ms"]["median"]
    worst = loss_agreement(ways)
    metrics.update(
        loss_max_rel_diff=worst,
        loss_rtol=LOSS_RTOL[args.dtype],
        losses_agree=worst <= LOSS_RTOL[args.dtype],
        bucketed_speedup=padded_ms / metrics["bucketed"]["epoch_ms"]["median"],
        packed_speedup=padded_ms / metrics["packed"]["epoch_ms"]["median"],
    )
    notes = ["peak_mib: memray, one epoch of a warm stepper above the heap before it"]
    if not ways[-1].packed:
        notes.append(f"{variant.name} has no packed kernel: 'packed' ran padded batches, masked")
    elif variant.device == "cpu":
        notes.append("packed input bypasses oneDNN on CPU: torch runs ATen's per-step LSTM")
    return metrics, series, notes
