"""`rnnopt timer-check`: our timing harness against torch.utils.benchmark.Timer.

Both time the same runner closure (call + sync) at the same shape and thread count: ours by
the profile protocol, torch's Timer by `blocked_autorange` and `adaptive_autorange`. Forward
and step only: Timer cannot leave out the forward that a timed backward needs.

The two report different statistics of the same calls. Ours is the median of single calls;
Timer times blocks of `number_per_run` calls and reports the median of the block means, and a
block mean carries every slow call in its block (a page-fault burst, a gc pass, a thread
wake-up), so with a heavy-tailed call time it sits above the per-call median: at the small
shape, where a call lasts a fraction of a millisecond, that was the whole 0.72 "disagreement"
of earlier runs. Timer also switches gc off while it times (timeit does). So the check compares
like with like: `ratio` = the median of our samples grouped into blocks of Timer's size / Timer's
blocked median, `agrees` when within AGREEMENT. `ratio_per_call` (our per-call median / Timer's)
and `tail` (our mean / our median) show how much of a gap is the statistic, not the clock.
"""

from __future__ import annotations

from rnnopt.cli.common import (
    add_measurement_arguments,
    add_timing_arguments,
    check_variant_name,
    config_of,
    record_fields,
    write_failure,
)
from rnnopt.experiments.timer_check import AGREEMENT, torch_timer
from rnnopt.measure.harness import VariantFailed, build_runner, guard_calls, phase_call
from rnnopt.measure.profile import time_phase
from rnnopt.measure.threads import apply_threads, threads_match
from rnnopt.measure.timing import block_means, quartiles
from rnnopt.records import make_record, write_record


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "timer-check",
        help="compare our timing with torch.utils.benchmark.Timer",
        description=__doc__,
    )
    add_measurement_arguments(parser, phases=("forward", "step"))
    add_timing_arguments(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    check_variant_name(args.variant)
    threads = apply_threads(args.threads)
    variant = None
    try:
        variant, runner = build_runner(args)
        ours = time_phase(args, args.phase, runner, variant.compiles, keep_samples=True)
        call, _ = guard_calls(*phase_call(runner, args.phase))
        sync = guard_calls(runner.sync)[0]
        # As much timed work as ours: with slow calls, min_time_s alone would give Timer's
        # blocked_autorange a single measurement.
        ours_total_s = ours["time_ms"]["mean"] * ours["time_ms"]["n"] / 1e3
        theirs = torch_timer(call, sync, args.threads, max(args.min_time_s, ours_total_s))
    except VariantFailed as failure:
        return write_failure("timer-check", args, failure, variant, threads_effective=threads)

    samples = ours.pop("samples_ms")
    ours_ms = ours["time_ms"]["median"]
    block = theirs["blocked"]["calls_per_measurement"]
    blocks = block_means(samples, block)
    ours_blocked_ms = quartiles(blocks)[1] if blocks else ours_ms
    ratios = {name: ours_blocked_ms / summary["median_ms"] for name, summary in theirs.items()}
    metrics = {
        "time_ms": ours["time_ms"],
        "noisy": ours["noisy"],
        "torch_timer": theirs,
        "blocked_median_ms": ours_blocked_ms,
        "ratio": ratios["blocked"],
        "ratio_adaptive": ratios["adaptive"],
        "ratio_per_call": ours_ms / theirs["blocked"]["median_ms"],
        "tail": ours["time_ms"]["mean"] / ours_ms,
        "agrees": abs(ratios["blocked"] - 1) <= AGREEMENT,
        "agrees_adaptive": abs(ratios["adaptive"] - 1) <= AGREEMENT,
    }
    notes = list(getattr(variant, "notes", []))
    if not threads_match(threads):
        notes.append("thread counts in force differ from --threads (see threads_effective)")
    record = make_record(
        "timer-check",
        seed=args.seed,
        config=config_of(args),
        metrics=metrics,
        notes=notes,
        threads_effective=threads,
        **record_fields(args, variant),
    )
    write_record(args.out, record)
    print(
        f"rnnopt timer-check: {variant.name} {args.phase}: ours {ours_ms:.3f} ms per call, "
        f"{ours_blocked_ms:.3f} ms in blocks of {block}, "
        f"Timer blocked {theirs['blocked']['median_ms']:.3f} ms "
        f"(ratio {ratios['blocked']:.3f}), adaptive {theirs['adaptive']['median_ms']:.3f} ms "
        f"(ratio {ratios['adaptive']:.3f}): {'agree' if metrics['agrees'] else 'DISAGREE'}"
    )
    return 0
