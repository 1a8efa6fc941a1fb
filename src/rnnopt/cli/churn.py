"""`rnnopt churn`: one phase timed with Python's cyclic garbage collector on or off (C2, C12).

--gc on: the collector runs as it always does; its collections inside the timed calls and
their pause are counted (gc.callbacks). --gc off: `gc.disable()` for the warm-up and the timed
calls, and an untimed `gc.collect()` before each call, so the time is the step without any
collection and memory stays bounded (`gc.freeze()` first keeps those collections short: they
skip the objects of the imports and the runner). The timing protocol is
profile's (rnnopt.measure.timing); one process per (variant, shape, mode).

Either way the record also counts, with the collector off, over a few untimed calls:
- gen0_growth_per_step: growth of the collector's generation-0 counter over one call, per
  time step: container objects allocated minus freed; a collection runs every
  gc.get_threshold()[0] of them;
- cyclic_garbage_per_call: objects `gc.collect()` finds unreachable after a call, i.e. what the
  previous call left that only the cyclic collector can free (0 when reference counting
  frees everything, as for NumPy temporaries).
"""

from __future__ import annotations

from rnnopt.cli.common import (
    add_measurement_arguments,
    add_timing_arguments,
    apply_variant_threads,
    check_variant_name,
    write_failure,
    write_measurement,
)
from rnnopt.experiments.churn import object_counts, timed
from rnnopt.measure.harness import (
    VariantFailed,
    build_runner,
    shape_of,
)
from rnnopt.models.flops import derived_metrics


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "churn", help="time a phase with the garbage collector on or off", description=__doc__
    )
    add_measurement_arguments(parser)
    add_timing_arguments(parser)
    parser.add_argument("--gc", choices=("on", "off"), required=True, help="cyclic collector")
    parser.set_defaults(func=run)


def run(args) -> int:
    check_variant_name(args.variant)
    threads = apply_variant_threads(args)
    variant = None
    try:
        variant, runner = build_runner(args)
        metrics = timed(args, variant, runner)
        metrics["objects"] = object_counts(runner, args.phase, args.seq_len)
    except VariantFailed as failure:
        return write_failure("churn", args, failure, variant, threads_effective=threads)
    metrics["gc_enabled"] = args.gc == "on"
    timed_ms = metrics["time_ms"]["mean"] * metrics["time_ms"]["n"]
    metrics["gc"]["share"] = metrics["gc"]["pause_ms"] / timed_ms if timed_ms > 0 else 0.0
    metrics.update(
        derived_metrics(
            variant.cell, shape_of(args), args.phase, metrics["time_ms"]["median"], None
        )
    )
    write_measurement(
        "churn",
        args,
        variant,
        metrics=metrics,
        threads_effective=threads,
    )
    print(
        f"rnnopt churn: {variant.name} {variant.dtype} {args.phase} gc {args.gc}: median "
        f"{metrics['time_ms']['median']:.3f} ms, GC {metrics['gc']['share']:.1%} of the time, "
        f"{metrics['objects']['cyclic_garbage_per_call']:.0f} cyclic garbage objects per call"
    )
    return 0
