"""`rnnopt profile`: time one phase of one variant at one shape (one record, one process).

Protocol (rnnopt.timing): threads set first; inputs converted by the runner before timing;
warm-up until stable (first call apart: compile_s); timed calls for at least --min-time-s and
--min-calls; backward calls each follow an untimed forward. Derived: tokens_per_s, gflops
from the analytic FLOP count and, with --peak, peak_fraction of the same library's GEMM peak.
"""

from __future__ import annotations

from rnnopt.counters import ProcessCounters
from rnnopt.flops import derived_metrics
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
from rnnopt.peak import peak_gflops_of
from rnnopt.records import make_record, read_record, write_record
from rnnopt.threads import apply_threads, threads_match
from rnnopt.timing import benchmark


def add_timing_arguments(parser) -> None:
    parser.add_argument("--min-time-s", type=positive_float, default=1.0)
    parser.add_argument("--min-calls", type=positive_int, default=10)
    parser.add_argument("--max-warmup-calls", type=positive_int, default=10)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "profile", help="time forward / backward / step of one variant", description=__doc__
    )
    add_measurement_arguments(parser)
    add_timing_arguments(parser)
    parser.add_argument(
        "--peak", metavar="PEAK.json", help="peak record (rnnopt peak): adds peak_fraction"
    )
    parser.set_defaults(func=run)


def time_phase(args, runner, compiles: bool, counters=None) -> dict:
    """The timing protocol on the runner's phase; variant errors surface as VariantFailed."""
    call, before = guard_calls(*phase_call(runner, args.phase))
    sync = guard_calls(runner.sync)[0]
    return benchmark(
        call,
        sync=sync,
        prepare=before,
        device=runner.device,
        compiles=compiles,
        min_time_s=args.min_time_s,
        min_calls=args.min_calls,
        max_warmup_calls=args.max_warmup_calls,
        counters=counters,
    )


def run(args) -> int:
    check_variant_name(args.variant)
    threads = apply_threads(args.threads)
    peak = read_record(args.peak) if args.peak else None
    variant = None
    try:
        variant, runner = prepare(args)
        with ProcessCounters() as counters:
            metrics = time_phase(args, runner, variant.compiles, counters)
    except VariantFailed as failure:
        return write_failure("profile", args, failure, variant, threads_effective=threads)

    notes = list(getattr(variant, "notes", []))
    peak_gflops = None
    if peak is not None:
        peak_gflops = peak_gflops_of(peak, variant.framework, variant.device, variant.dtype)
        if peak_gflops is None:
            notes.append(f"{args.peak} has no GEMM peak for {variant.framework} {variant.dtype}")
        elif peak.get("threads") != args.threads:
            notes.append(f"GEMM peak measured with {peak.get('threads')} threads")
    metrics.update(
        derived_metrics(
            variant.cell, shape_of(args), args.phase, metrics["time_ms"]["median"], peak_gflops
        )
    )
    if not threads_match(threads):
        notes.append("thread counts in force differ from --threads (see threads_effective)")
    if not metrics["warmup_stable"]:
        notes.append(f"warm-up not stable after {metrics['warmup_calls']} calls")
    record = make_record(
        "profile",
        seed=args.seed,
        config=config_of(args),
        metrics=metrics,
        notes=notes,
        threads_effective=threads,
        **record_fields(args, variant),
    )
    write_record(args.out, record)
    time_ms = metrics["time_ms"]
    print(
        f"rnnopt profile: {variant.name} {variant.dtype} {args.phase}: "
        f"median {time_ms['median']:.3f} ms (IQR {time_ms['iqr']:.3f}, n={time_ms['n']}), "
        f"{metrics['gflops']:.1f} GFLOP/s" + (" NOISY" if metrics["noisy"] else "")
    )
    return 0
