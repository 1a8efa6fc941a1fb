"""`rnnopt train`: train one variant on a saved dataset and write one record of kind "train".

Every variant starts from the same weights and sees the same batches of the training split;
the last sequences of the dataset are held out (rnnopt.train.loop). A combination this host or
variant does not offer writes a `skipped` record, an error inside the variant a `failed` (or
`oom`) record, NaN/Inf a `diverged` one: all exit 0.
"""

from __future__ import annotations

from rnnopt.cli.common import (
    config_of,
    fraction,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    set_threads,
)
from rnnopt.errors import UserError
from rnnopt.measure.harness import uses_torch
from rnnopt.models.variants import get_variant, list_variants
from rnnopt.models.variants.base import DEVICES, DTYPES
from rnnopt.records import failure_of, make_record, write_record
from rnnopt.train import data
from rnnopt.train.loop import TrainConfig, train


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train one variant for a fixed number of steps; loss curve and time per step",
        description=__doc__.split("\n\n")[1],
    )
    parser.add_argument(
        "--variant",
        required=True,
        choices=list_variants(),
        metavar="VARIANT",
        help="registry name, e.g. numpy-lstm-fused (rnnopt verify lists them)",
    )
    parser.add_argument(
        "--dtype", default="float32", choices=DTYPES, help="dtype the variant computes in"
    )
    parser.add_argument("--device", default="cpu", choices=DEVICES, help="where it computes")
    parser.add_argument("--data", required=True, help="dataset .npz (with its .json manifest)")
    parser.add_argument("--steps", type=positive_int, required=True, help="optimiser steps")
    parser.add_argument(
        "--batch", type=positive_int, required=True, help="sequences per micro-batch"
    )
    parser.add_argument("--hidden-size", type=positive_int, required=True, help="units of h_t")
    parser.add_argument(
        "--optimizer", default="sgd", choices=("sgd", "adam"), help="the update rule"
    )
    parser.add_argument("--lr", type=positive_float, required=True, help="learning rate")
    parser.add_argument("--momentum", type=non_negative_float, default=0.0, help="sgd only")
    parser.add_argument(
        "--weight-decay", type=non_negative_float, default=0.0, help="L2, as torch.optim"
    )
    parser.add_argument(
        "--clip-norm", type=positive_float, help="clip the global gradient norm to this"
    )
    parser.add_argument("--accumulate", type=positive_int, default=1, help="micro-batches per step")
    parser.add_argument(
        "--holdout-fraction",
        type=fraction,
        default=0.2,
        help="the last sequences of the dataset held out, never trained on",
    )
    parser.add_argument(
        "--eval-every",
        type=positive_int,
        default=50,
        help="steps between held-out evaluations (also before the first and after the last)",
    )
    parser.add_argument(
        "--threads", type=positive_int, metavar="N", help="torch and BLAS threads (default: as is)"
    )
    parser.add_argument("--seed", type=int, default=0, help="weights and batch order")
    parser.add_argument(
        "--untimed",
        action="store_true",
        help="the job shares the CPU with others: leave the timing metrics out of the record",
    )
    parser.add_argument(
        "--process",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="which of the independent processes timing this run this is (record field "
        "`process`; the workflow runs the batch-size runs train.experiments.repeats times)",
    )
    parser.add_argument("--out", required=True, help="record to write (.json)")
    parser.set_defaults(func=run)


# Metrics (and the step_time_ms series) that mean something only when the job had the CPU
# to itself.
TIMING_METRICS = ("time_per_step_ms", "time_per_step_q10_ms", "first_step_ms", "tokens_per_s")


def run(args) -> int:
    threads = set_threads(args.threads, uses_torch(args.variant, args.device))
    config = TrainConfig(
        steps=args.steps,
        batch=args.batch,
        hidden_size=args.hidden_size,
        optimizer=args.optimizer,
        lr=args.lr,
        momentum=args.momentum,
        weight_decay=args.weight_decay,
        clip_norm=args.clip_norm,
        accumulate=args.accumulate,
        seed=args.seed,
        holdout_fraction=args.holdout_fraction,
        eval_every=args.eval_every,
    )
    dataset = data.load(args.data)
    n_sequences, seq_len, input_size = dataset.x.shape
    config.check(n_sequences)
    fields = {
        "seed": args.seed,
        "config": config_of(args),
        "task": dataset.manifest["task"],
        "process": args.process,
        "shape": {
            "batch": args.batch,
            "seq_len": seq_len,
            "input_size": input_size,
            "hidden_size": args.hidden_size,
        },
        **threads,
    }
    try:
        variant = get_variant(args.variant, dtype=args.dtype, device=args.device)
    except UserError as error:  # names were checked by argparse: the combination is unavailable
        record = make_record(
            "train",
            status="skipped",
            reason=str(error),
            variant=args.variant,
            dtype=args.dtype,
            device=args.device,
            **fields,
        )
        write_record(args.out, record)
        return 0
    try:
        result = train(variant, dataset, config)
    except Exception as error:  # the variant broke or ran out of memory: a record, not a crash
        status, reason = failure_of(error)
        record = make_record("train", status=status, reason=reason, variant=variant, **fields)
    else:
        notes = [*result.notes, *getattr(variant, "notes", [])]
        metrics, series = result.metrics, result.series
        if args.untimed:
            metrics = {k: v for k, v in metrics.items() if k not in TIMING_METRICS}
            series = {k: v for k, v in series.items() if k != "step_time_ms"}
            notes.append("untimed: ran beside other jobs, so no time per step is recorded")
        elif variant.compiles:
            notes.append("first_step_ms includes compilation; time_per_step_ms leaves it out")
        record = make_record(
            "train",
            status=result.status,
            reason=result.reason,
            metrics=metrics,
            variant=variant,
            series=series,
            notes=notes,
            **fields,
        )
    write_record(args.out, record)
    return 0
