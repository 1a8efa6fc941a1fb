"""`rnnopt precision`: one variant and dtype against the float64 reference over a long sequence.

Outputs and every gradient on a seeded problem of --seq-len steps (default 1000): maximum
absolute and relative error, the error of the last step, its growth along the sequence and
the error per step (series error_per_step), in one record of kind "precision".
"""

from __future__ import annotations

from rnnopt.cli.common import (
    add_seed_argument,
    add_shape_arguments,
    add_variant_arguments,
    apply_variant_threads,
    check_variant_name,
    positive_int,
    write_failure,
    write_measurement,
)
from rnnopt.experiments.precision import DEFAULT_SHAPE, long_sequence_errors
from rnnopt.measure.harness import VariantFailed, guarded
from rnnopt.models.variants import get_variant


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "precision",
        help="error against the float64 reference over a long sequence",
        description=__doc__,
    )
    add_variant_arguments(parser)
    add_shape_arguments(parser, **DEFAULT_SHAPE)
    parser.add_argument(
        "--threads",
        type=positive_int,
        default=1,
        metavar="N",
        help="torch and BLAS threads of the measuring process (at most its cores)",
    )
    add_seed_argument(parser)
    parser.add_argument("--out", required=True, metavar="FILE.json", help="record to write")
    parser.set_defaults(func=run, phase=None)


def run(args) -> int:
    check_variant_name(args.variant)
    threads = apply_variant_threads(args)
    shape = {k: getattr(args, k) for k in DEFAULT_SHAPE}
    variant = None
    try:
        variant = guarded(get_variant, args.variant, dtype=args.dtype, device=args.device)
        metrics, series = guarded(long_sequence_errors, variant, shape, args.seed)
    except VariantFailed as failure:
        return write_failure("precision", args, failure, variant, threads_effective=threads)
    write_measurement(
        "precision",
        args,
        variant,
        metrics=metrics,
        series=series,
        threads_effective=threads,
    )
    output = metrics["output"]
    print(
        f"rnnopt precision: {variant.name} {variant.dtype} T={args.seq_len}: output max abs "
        f"error {output['max_abs_error']:.2e} (last step {output['last_step_abs_error']:.2e}), "
        f"worst gradient {metrics['gradients']['worst']:.2e}"
    )
    return 0
