"""GC and object churn (C2, C12): a phase timed with the cyclic collector on or off, and the
objects a call leaves to it."""

from __future__ import annotations

import gc

from rnnopt.measure.counters import ProcessCounters
from rnnopt.measure.harness import (
    guard_calls,
    guarded,
    phase_call,
)
from rnnopt.measure.profile import timing_budget
from rnnopt.measure.timing import benchmark

OBJECT_CALLS = 3  # untimed calls the object counts average over (after one to settle)


def collect_before(before):
    """The untimed preparation of a --gc off call: a full collection, then the phase's own."""

    def prepare_call():
        gc.collect()
        if before is not None:
            before()

    return prepare_call


def object_counts(runner, phase: str, seq_len: int, calls: int = OBJECT_CALLS) -> dict:
    """gen0 counter growth per step and cyclic garbage per call, with the collector off."""
    call, before = phase_call(runner, phase)
    enabled = gc.isenabled()
    gc.disable()
    try:
        if before is not None:
            before()
        guarded(call)
        gc.collect()
        growth, garbage = [], []
        for _ in range(calls):
            if before is not None:
                before()
            start = gc.get_count()[0]
            guarded(call)
            growth.append(gc.get_count()[0] - start)
            garbage.append(gc.collect())
    finally:
        if enabled:
            gc.enable()
    return {
        "gen0_growth_per_step": sum(growth) / calls / seq_len,
        "cyclic_garbage_per_call": sum(garbage) / calls,
        "cyclic_garbage_per_step": sum(garbage) / calls / seq_len,
        "gc_threshold0": gc.get_threshold()[0],
    }


def timed(args, variant, runner) -> dict:
    """The timing protocol (rnnopt.measure.timing) with the collector as --gc says."""
    call, before = guard_calls(*phase_call(runner, args.phase))
    sync = guard_calls(runner.sync)[0]
    collector_off = args.gc == "off"
    enabled = gc.isenabled()
    if collector_off:
        before = collect_before(before)
        gc.disable()
        gc.freeze()  # the untimed collections then skip every object that exists already
    try:
        with ProcessCounters() as counters:
            return benchmark(
                call,
                sync=sync,
                untimed_setup=before,
                device=runner.device,
                compiles=variant.compiles,
                **timing_budget(args),
                counters=counters,
            )
    finally:
        gc.unfreeze()
        if enabled:
            gc.enable()
