"""The profile protocol on a prepared runner: a forward alone, or one loop of training steps
timed segment by segment (forward, backward, update), and the GEMM-only split of a phase.

`args` is any object with the timing budget's attributes (min_time_s, min_calls,
max_warmup_calls); rnnopt profile passes its parsed flags, time_gemm_split's with the phase.
"""

from __future__ import annotations

from contextlib import ExitStack

from rnnopt.measure.contention import Contention
from rnnopt.measure.counters import ProcessCounters
from rnnopt.measure.harness import guard_calls, phase_call
from rnnopt.measure.spells import SpellGate
from rnnopt.measure.split import gemm_and_barrier_call, gemm_only_call, split_metrics
from rnnopt.measure.timing import benchmark, benchmark_segments


def timing_budget(args) -> dict:
    """The stopping rules of the timing protocol, from the flags."""
    return {
        "min_time_s": args.min_time_s,
        "min_calls": args.min_calls,
        "max_warmup_calls": args.max_warmup_calls,
    }


def time_phase(
    args, phase: str, runner, compiles: bool, counters=None, keep_samples: bool = False
) -> dict:
    """The timing protocol on the runner's `phase`; variant errors surface as VariantFailed."""
    call, before = guard_calls(*phase_call(runner, phase))
    sync = guard_calls(runner.sync)[0]
    return benchmark(
        call,
        sync=sync,
        untimed_setup=before,
        device=runner.device,
        compiles=compiles,
        counters=counters,
        keep_samples=keep_samples,
        **timing_budget(args),
    )


TRAINING_STEP_NOTE = (
    "timed in one loop of training steps: forward and backward are segments of the step "
    "(forward, backward, update), each in its own bracket"
)


def time_training_steps(args, runner, compiles: bool) -> dict[str, dict]:
    """Metrics of forward, backward and step from one loop of training steps."""
    names = ("forward", "backward", "update")
    calls = guard_calls(runner.forward, runner.backward, runner.update)
    with ExitStack() as stack:
        counters = {
            phase: stack.enter_context(ProcessCounters())
            for phase in ("forward", "backward", "step")
        }
        return benchmark_segments(
            list(zip(names, calls, strict=True)),
            sync=guard_calls(runner.sync)[0],
            device=runner.device,
            compiles=compiles,
            counters=counters,
            total="step",
            keep_samples=True,
            **timing_budget(args),
        )


def spell_gate(args) -> SpellGate | None:
    """The wait for a slow spell to pass (rnnopt.measure.spells) where --spell-log names the
    run's log; None (no waiting) without one."""
    if getattr(args, "spell_log", None) is None:
        return None
    return SpellGate(args.spell_log, args.spell_wait_s, args.spell_budget_s)


def time_phases(args, phases: list[str], runner, compiles: bool) -> dict[str, dict]:
    """Metrics per phase, each with its samples_ms and the contention metrics of the whole
    timing loop (rnnopt.measure.contention; after a wait for a slow spell to pass, with
    --spell-log): a forward alone by itself, otherwise one loop of training steps."""
    with Contention(gate=spell_gate(args)) as contention:
        if phases == ["forward"]:
            with ProcessCounters() as counters:
                timed = {"forward": time_phase(args, "forward", runner, compiles, counters, True)}
        else:
            timed = time_training_steps(args, runner, compiles)
    for metrics in timed.values():
        metrics["contention"] = contention.metrics()
    return timed


# The GEMM-only loop runs on buffers the phase has already warmed and compiles nothing: two
# warm-up calls suffice, and keep the split within the run's budget at the fastrnns shape.
SPLIT_WARMUP_CALLS = 2


def time_gemm_split(args, runner, phase_median_ms: float) -> dict:
    """split.* metrics (rnnopt.measure.split) where the runner can run the phase's GEMMs alone."""
    gemm_call = gemm_only_call(runner, args.phase)
    if gemm_call is None:
        return {}
    barrier_call = gemm_and_barrier_call(runner, args.phase)
    return split_metrics(
        guard_calls(gemm_call)[0],
        phase_median_ms,
        barrier_call=None if barrier_call is None else guard_calls(barrier_call)[0],
        sync=guard_calls(runner.sync)[0],
        device=runner.device,
        min_time_s=args.min_time_s,
        min_calls=args.min_calls,
        max_warmup_calls=min(SPLIT_WARMUP_CALLS, args.max_warmup_calls),
    )
