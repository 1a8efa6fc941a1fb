"""`rnnopt memory`: the memory of one phase of one variant at one shape (one record).

One measured call is the phase itself; for backward, the forward it needs plus backward. The
RSS window covers a fresh runner's first call (lazy workspaces included) and `--calls` more;
tracemalloc then watches one more call, gc the RSS window. `peak_mib` is the first call's
increment (what one call needs); the window's increment adds whatever the runner keeps from
one call while the next builds its own. The analytic BPTT minimum (rnnopt.flops.memory_model)
stands beside the peak as `peak_over_minimum`.
"""

from __future__ import annotations

from rnnopt.counters import GcMonitor, maxrss_mib
from rnnopt.flops import memory_model
from rnnopt.harness import (
    VariantFailed,
    add_measurement_arguments,
    check_variant_name,
    config_of,
    guard_calls,
    phase_call,
    positive_float,
    positive_int,
    prepare,
    record_fields,
    shape_of,
    write_failure,
)
from rnnopt.memory import MIB, CudaPeaks, rss_profile, traced_call
from rnnopt.records import make_record, write_record
from rnnopt.threads import apply_threads, threads_match

TRACEMALLOC_BLIND = "tracemalloc does not see torch's allocations: its figures cover Python only"


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "memory",
        help="peak memory of one phase: RSS, tracemalloc, gc, CUDA; vs the analytic minimum",
        description=__doc__,
    )
    add_measurement_arguments(parser)
    parser.add_argument(
        "--calls", type=positive_int, default=3, help="calls after the first (default 3)"
    )
    parser.add_argument(
        "--interval-s", type=positive_float, default=0.001, help="RSS sampling interval"
    )
    parser.set_defaults(func=run)


def run(args) -> int:
    check_variant_name(args.variant)
    threads = apply_threads(args.threads)
    variant = None
    try:
        variant, runner = prepare(args)
        call, before = guard_calls(*phase_call(runner, args.phase))
        sync = guard_calls(runner.sync)[0]

        def one_call() -> None:
            if before is not None:
                before()
            call()
            sync()

        metrics, series = measure(args, runner, one_call)
    except VariantFailed as failure:
        return write_failure("memory", args, failure, variant, threads_effective=threads)

    notes = list(getattr(variant, "notes", []))
    if variant.framework == "torch":
        notes.append(TRACEMALLOC_BLIND)
    if not threads_match(threads):
        notes.append("thread counts in force differ from --threads (see threads_effective)")
    if runner.device == "cuda":
        peak_source = "torch.cuda.max_memory_allocated"
        peak_mib = metrics["cuda"]["first_call_peak_allocated_mib"]
    else:
        peak_source, peak_mib = "rss", metrics["rss"]["first_call_increment_mib"]
    analytic = memory_model(variant.cell, shape_of(args), variant.dtype, args.phase)
    minimum_mib = analytic["minimum_bytes"] / MIB
    metrics.update(
        peak_mib=peak_mib,
        minimum_mib=minimum_mib,
        peak_over_minimum=peak_mib / minimum_mib if minimum_mib > 0 else None,
        analytic=analytic,
    )
    record = make_record(
        "memory",
        seed=args.seed,
        config=config_of(args),
        metrics=metrics,
        series=series,
        notes=notes,
        peak_source=peak_source,
        threads_effective=threads,
        **record_fields(args, variant),
    )
    write_record(args.out, record)
    print(
        f"rnnopt memory: {variant.name} {args.phase}: peak {peak_mib:.1f} MiB ({peak_source}), "
        f"analytic minimum {minimum_mib:.1f} MiB, "
        f"numpy buffers/step {metrics['tracemalloc']['numpy_blocks_per_step']:.2f}"
    )
    return 0


def measure(args, runner, one_call) -> tuple[dict, dict]:
    """(metrics, series) of the three instruments; variant errors surface as VariantFailed."""
    cuda = CudaPeaks() if runner.device == "cuda" else None
    cuda_first: dict = {}

    def first_call() -> None:
        one_call()
        if cuda is not None:
            cuda_first.update(cuda.read())

    maxrss_before = maxrss_mib()
    with GcMonitor() as gc_monitor:
        gc_monitor.active = True
        rss = rss_profile([first_call] + [one_call] * args.calls, args.interval_s)
        gc_monitor.active = False
    maxrss_after = maxrss_mib()
    series = rss.pop("series")
    metrics = {
        "rss": rss,
        "maxrss": {
            "before_mib": maxrss_before,
            "after_mib": maxrss_after,
            "increase_mib": maxrss_after - maxrss_before,
        },
        "gc": gc_monitor.metrics(),
        "tracemalloc": traced_call(one_call, runner, args.seq_len),
    }
    if cuda is not None:
        metrics["cuda"] = {
            **cuda.read(),
            "first_call_peak_allocated_mib": cuda_first["peak_allocated_mib"],
        }
    return metrics, series
