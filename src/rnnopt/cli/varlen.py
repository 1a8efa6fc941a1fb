"""`rnnopt varlen`: one variable-length dataset trained and timed three ways
(rnnopt.experiments.varlen): padded to each batch's longest, length-sorted buckets, packed
(PackedSequence for a library layer; masking for the NumPy ladder and the torch cell loops).

The dataset: rnnopt.train.data.generate(task, n_sequences, seq_len, seed, variable_length=True,
min_length): lengths uniform (integers) in [min_length, seq_len]. Per way: padding fraction
(wasted / computed tokens, i.e. wasted FLOPs), analytic FLOPs per epoch, median epoch time
over the epochs after the first, valid tokens/s, peak heap of one more epoch above the heap
before it (rnnopt.measure.heap.tracked: memray), and the loss of every epoch; the largest relative
difference between the ways' losses says whether they agree (rnnopt.experiments.varlen.LOSS_RTOL).
"""

from __future__ import annotations

from rnnopt.cli.common import (
    add_threads_argument,
    add_variant_arguments,
    apply_variant_threads,
    check_variant_name,
    config_of,
    positive_float,
    positive_int,
    unbuilt_variant,
)
from rnnopt.errors import UserError
from rnnopt.experiments import varlen
from rnnopt.experiments.varlen import measure
from rnnopt.measure.harness import VariantFailed, guarded
from rnnopt.models.flops import Shape
from rnnopt.models.variants import get_variant
from rnnopt.records import failure_of, make_record, write_record
from rnnopt.train import data


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "varlen",
        help="variable-length batching: padded, length-sorted buckets, packed / masked",
        description=__doc__,
    )
    add_variant_arguments(parser)
    parser.add_argument(
        "--task", default="sine", choices=data.TASKS, help="synthetic task of the dataset"
    )
    parser.add_argument(
        "--n-sequences", type=positive_int, required=True, metavar="N", help="sequences"
    )
    parser.add_argument(
        "--seq-len", type=positive_int, required=True, metavar="T", help="longest length"
    )
    parser.add_argument(
        "--min-length",
        type=positive_int,
        required=True,
        metavar="L",
        help="shortest length (lengths uniform in [L, T])",
    )
    parser.add_argument(
        "--batch", type=positive_int, required=True, metavar="B", help="sequences per step"
    )
    parser.add_argument(
        "--hidden-size", type=positive_int, required=True, metavar="H", help="units of h_t"
    )
    parser.add_argument(
        "--epochs", type=positive_int, default=5, help="epochs per way (the first is warm-up)"
    )
    parser.add_argument(
        "--optimizer", choices=("sgd", "adam"), default="adam", help="optimizer of the steps"
    )
    parser.add_argument("--lr", type=positive_float, default=0.01, help="learning rate")
    add_threads_argument(parser)
    parser.add_argument("--seed", type=int, default=0, help="seed of the dataset and weights")
    parser.add_argument("--out", required=True, metavar="FILE.json", help="record to write")
    parser.set_defaults(func=run)


def run(args) -> int:
    check_variant_name(args.variant)
    if args.min_length > args.seq_len:
        raise UserError(f"--min-length {args.min_length} exceeds --seq-len {args.seq_len}")
    threads = apply_variant_threads(args)
    dataset = data.generate(args.task, args.n_sequences, args.seq_len, args.seed,
                            variable_length=True, min_length=args.min_length)  # fmt: skip
    fields = unbuilt_variant(args)
    status, reason, metrics, series, notes = "ok", None, {}, {}, []
    try:
        variant = guarded(get_variant, args.variant, dtype=args.dtype, device=args.device)
        fields = {"variant": variant}
        metrics, series, notes = measure(args, variant, dataset)
    except VariantFailed as failure:
        status, reason = failure_of(failure.error)  # a failure's traceback goes to the log
    shape = Shape(args.batch, args.seq_len, dataset.x.shape[2], args.hidden_size)
    record = make_record(
        "varlen",
        status=status,
        reason=reason,
        seed=args.seed,
        config={**config_of(args), "lengths": "uniform integers in [min_length, seq_len]"},
        metrics=metrics,
        series=series,
        notes=notes,
        task=args.task,
        phase="step",
        shape=shape.as_dict(),
        threads=args.threads,
        threads_effective=threads,
        **fields,
    )
    write_record(args.out, record)
    if status != "ok":
        print(f"rnnopt varlen: {status}: {reason}")
        return 0
    print(f"rnnopt varlen: {args.variant} {args.dtype}, lengths {args.min_length}..{args.seq_len}:")
    for name in varlen.WAYS:
        m = metrics[name]
        print(
            f"  {name}: padding {m['padding_fraction']:.1%}, epoch "
            f"{m['epoch_ms']['median']:.1f} ms, peak {m['peak_mib']:.2f} MiB, "
            f"final loss {m['final_loss']:.6g}"
        )
    print(
        f"  losses agree: {metrics['losses_agree']} "
        f"(max rel diff {metrics['loss_max_rel_diff']:.2e})"
    )
    return 0
