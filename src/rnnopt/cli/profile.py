"""`rnnopt profile`: time phases of one variant at one shape, in one process, one record each.

Protocol (rnnopt.measure.timing): threads set first; inputs converted by the runner before timing.
Backward and step are timed in one loop of training steps (forward, backward, SGD update),
each segment in its own bracket (rnnopt.measure.timing.benchmark_segments): forward and backward are
the step's own segments, step their sum with the update's. Warm-up until the step is stable
(first call apart: compile_s), then timed steps for at least --min-time-s and --min-calls. A
forward asked for alone is timed alone (rnnopt.measure.timing.benchmark). Derived: tokens_per_s,
gflops from the analytic FLOP count and, with --peak, peak_fraction of the host's GEMM ceiling
for the dtype: the best GEMM any library reached in the peak record
(rnnopt.measure.peak.ceiling_of), so a fraction above 1 means the ceiling is wrong, not that the
variant beat the machine. Runners that can run a phase's GEMMs alone (the fused and numba NumPy
rungs) add split.*
metrics: GEMM vs elementwise time (rnnopt.measure.split). On CUDA the step record also names the
kernels of one more step, read with torch.profiler (rnnopt.measure.cuda_kernels): which cuDNN RNN
algorithm ran.
"""

from __future__ import annotations

import argparse

from rnnopt.cli.common import (
    add_measurement_arguments,
    add_spell_arguments,
    add_timing_arguments,
    apply_variant_threads,
    check_variant_name,
    fill_template,
    non_negative_int,
    write_failure,
    write_measurement,
)
from rnnopt.errors import UnavailableError, UserError
from rnnopt.measure.cuda_kernels import step_kernels
from rnnopt.measure.harness import VariantFailed, build_runner, shape_of
from rnnopt.measure.host import native_bf16
from rnnopt.measure.peak import ceiling_of
from rnnopt.measure.profile import TRAINING_STEP_NOTE, time_gemm_split, time_phases
from rnnopt.measure.threads import apply_threads, threads_match
from rnnopt.models.flops import PHASES, derived_metrics
from rnnopt.records import read_record


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "profile", help="time forward / backward / step of one variant", description=__doc__
    )
    add_measurement_arguments(parser, phases=PHASES, several_phases=True)
    add_timing_arguments(parser)
    parser.add_argument(
        "--split-phases",
        nargs="*",
        choices=PHASES,
        default=list(PHASES),
        help="phases that also time the GEMM-only loop, where the runner has one (default all)",
    )
    parser.add_argument(
        "--peak", metavar="PEAK.json", help="peak record (rnnopt peak): adds peak_fraction"
    )
    parser.add_argument(
        "--process",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="which of the independent processes timing this configuration this is (record "
        "field `process`; the workflow runs 0 .. timing.repeats-1, in passes)",
    )
    add_spell_arguments(parser)
    parser.add_argument(
        "--native-only",
        action="store_true",
        help="record bfloat16 on a CPU without native bfloat16 arithmetic as skipped, untimed",
    )
    parser.set_defaults(func=run)


def emulated_dtype(args) -> str | None:
    """Why --native-only skips this job (bfloat16 the CPU can only emulate), or None."""
    if not args.native_only or args.device != "cpu" or args.dtype != "bfloat16":
        return None
    if native_bf16():
        return None
    return (
        "no native bfloat16 on this CPU (no avx512_bf16 / amx_bf16 flag): autocast emulates "
        "it, several times slower; timed at the smaller shapes only (native_only)"
    )


def phase_args(args, phase: str) -> argparse.Namespace:
    """The flags of one phase: --phase is that phase, --out its record path."""
    return argparse.Namespace(
        **{**vars(args), "phase": phase, "out": fill_template(args.out, phase=phase)}
    )


def run(args) -> int:
    check_variant_name(args.variant)
    phases = list(dict.fromkeys(args.phase))
    if len(phases) > 1 and "{phase}" not in args.out:
        raise UserError(f"--out {args.out!r} must contain {{phase}} to hold several phases")
    emulated = emulated_dtype(args)
    if emulated is not None:
        # Only skipped: torch (2-3 s to import) is not needed for that.
        threads = apply_threads(args.threads, use_torch=False)
        failure = VariantFailed(UnavailableError(emulated))
        for phase in phases:
            write_failure(
                "profile",
                phase_args(args, phase),
                failure,
                threads_effective=threads,
                process=args.process,
            )
        return 0
    threads = apply_variant_threads(args)
    peak = read_record(args.peak) if args.peak else None
    variant = None
    try:
        variant, runner = build_runner(phase_args(args, phases[0]))
        timed = time_phases(args, phases, runner, variant.compiles)
    except VariantFailed as failure:
        for phase in phases:
            write_failure(
                "profile",
                phase_args(args, phase),
                failure,
                variant,
                threads_effective=threads,
                process=args.process,
            )
        return 0
    if runner.device == "cuda" and "step" in timed:
        kernels, note = step_kernels(runner)
        timed["step"].update(kernels)
        if note:
            variant.note(note)
    for phase in phases:
        one, metrics = phase_args(args, phase), timed[phase]
        try:
            if phase in args.split_phases:
                metrics.update(time_gemm_split(one, runner, metrics["time_ms"]["median"]))
        except VariantFailed as failure:
            write_failure(
                "profile", one, failure, variant, threads_effective=threads, process=args.process
            )
            continue
        write_profile(one, variant, metrics, peak, threads, segmented=phases != ["forward"])
    return 0


def write_profile(
    args, variant, metrics: dict, peak: dict | None, threads: dict, segmented: bool = False
) -> None:
    """The record of one timed phase, with its derived throughput and roofline figures."""
    notes = list(getattr(variant, "notes", []))
    if segmented:
        notes.append(TRAINING_STEP_NOTE)
    peak_gflops = None
    if peak is not None:
        ceiling = ceiling_of(peak, variant.device, variant.dtype)
        if ceiling is None:
            notes.append(f"{args.peak} has no GEMM ceiling for {variant.device} {variant.dtype}")
        else:
            peak_gflops = ceiling["gflops"]
            notes.append(f"ceiling: {ceiling['library']} {ceiling['dtype']} GEMM")
            if peak.get("threads") != args.threads:
                notes.append(f"GEMM ceiling measured with {peak.get('threads')} threads")
    metrics.update(
        derived_metrics(
            variant.cell, shape_of(args), args.phase, metrics["time_ms"]["median"], peak_gflops
        )
    )
    if not threads_match(threads):
        notes.append("thread counts in force differ from --threads (see threads_effective)")
    if not metrics["warmup_stable"]:
        notes.append(f"warm-up not stable after {metrics['warmup_calls']} calls")
    write_measurement(
        "profile",
        args,
        variant,
        metrics=metrics,
        notes=notes,
        threads_effective=threads,
        process=args.process,
    )
    time_ms = metrics["time_ms"]
    print(
        f"rnnopt profile: {variant.name} {variant.dtype} {args.phase}: "
        f"median {time_ms['median']:.3f} ms (IQR {time_ms['iqr']:.3f}, n={time_ms['n']}), "
        f"{metrics['gflops']:.1f} GFLOP/s" + (" NOISY" if metrics["noisy"] else "")
    )
