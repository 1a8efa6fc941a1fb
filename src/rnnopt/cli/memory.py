"""`rnnopt memory`: the memory of one phase of one variant at one shape (one record).

One measured call is the phase itself; for backward, the forward it needs plus backward.

The headline, `peak_mib`, is one instrument for every framework (rnnopt.measure.heap): the peak heap
bytes, at the allocator level (memray; torch.cuda on a GPU), of a fresh runner built and
called once, above the heap before it, after a throwaway warm-up runner paid the libraries'
one-time buffers (reported apart: `heap.library_buffers_mib`); `kept_mib` is what that runner
keeps between steps. The analytic BPTT minimum (rnnopt.models.flops.memory_model) stands
beside it as `peak_over_minimum`; above EXPLAIN_ABOVE the record says where the rest goes
(`explanation`). Only the headline feeds the report's memory ratios.

Secondary instruments, each for what it is good at: the RSS of another fresh runner's first
call and `--calls` more, sampled by memory_profiler (the timeline figure); tracemalloc on one
more call (numpy buffers allocated per time step); gc over the RSS window.
"""

from __future__ import annotations

from rnnopt.cli.common import (
    add_measurement_arguments,
    apply_variant_threads,
    check_variant_name,
    positive_float,
    positive_int,
    write_failure,
    write_measurement,
)
from rnnopt.measure.harness import (
    VariantFailed,
    guard_calls,
    guarded,
    phase_call,
    runner_factory,
    shape_of,
)
from rnnopt.measure.heap import step_peak_of
from rnnopt.measure.memory import (
    MIB,
    TRACEMALLOC_BLIND,
    explain,
    measure,
)
from rnnopt.measure.threads import threads_match
from rnnopt.models.flops import memory_model


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "memory",
        help="peak memory of one phase: RSS, tracemalloc, gc, CUDA; vs the analytic minimum",
        description=__doc__,
    )
    add_measurement_arguments(parser)
    parser.add_argument("--calls", type=positive_int, default=3, help="calls after the first")
    parser.add_argument(
        "--interval-s", type=positive_float, default=0.001, help="RSS sampling interval"
    )
    parser.set_defaults(func=run)


def run(args) -> int:
    check_variant_name(args.variant)
    threads = apply_variant_threads(args)
    variant = None
    try:
        variant, make_runner = runner_factory(args)
        heap = guarded(step_peak_of, make_runner, args.phase, args.device)
        runner = guarded(make_runner)
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
    peak_mib = heap["peak_mib"]
    analytic = memory_model(variant.cell, shape_of(args), variant.dtype, args.phase)
    minimum_mib = analytic["minimum_bytes"] / MIB
    ratio = peak_mib / minimum_mib if minimum_mib > 0 else None
    metrics.update(
        heap=heap,
        peak_mib=peak_mib,
        kept_mib=heap["kept_mib"],
        minimum_mib=minimum_mib,
        peak_over_minimum=ratio,
        analytic=analytic,
    )
    write_measurement(
        "memory",
        args,
        variant,
        metrics=metrics,
        series=series,
        notes=notes,
        peak_source=heap["instrument"],
        explanation=explain(variant, analytic, heap, ratio),
        threads_effective=threads,
    )
    print(
        f"rnnopt memory: {variant.name} {args.phase}: peak {peak_mib:.1f} MiB "
        f"({heap['instrument']}), kept {heap['kept_mib']:.1f} MiB, "
        f"analytic minimum {minimum_mib:.1f} MiB, "
        f"numpy buffers/step {metrics['tracemalloc']['numpy_blocks_per_step']:.2f}"
    )
    return 0
