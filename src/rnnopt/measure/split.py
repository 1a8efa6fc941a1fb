"""Where a phase's time goes: its GEMMs versus everything else (the elementwise work).

A runner that can (`gemm_only(phase) -> callable`, the fused, numba and persistent NumPy
rungs) runs the same loop with its GEMM calls alone, on the same buffers; that loop is timed by
the same protocol as the phase (rnnopt.measure.timing.benchmark), and

    split.gemm_ms        = median of the GEMM-only loop
    split.elementwise_ms = phase median - gemm_ms (activations, state updates, copies, update)
    split.gemm_share     = gemm_ms / phase median

A runner whose threads meet at a barrier every step (`gemm_and_barrier(phase)`, the persistent
rung) also runs the loop of its GEMMs and barriers; then

    split.barrier_ms     = median of that loop - gemm_ms: the threads waiting for each other
    split.elementwise_ms = phase median - median of that loop

Both medians come from the same process and protocol, one after the other. The difference is
an estimate: a GEMM alone may run a little faster than between elementwise passes that evict
its operands from cache, which counts that eviction as elementwise time.
"""

from __future__ import annotations

from collections.abc import Callable

from rnnopt.measure.timing import benchmark


def gemm_only_call(runner, phase: str) -> Callable[[], None] | None:
    """The runner's GEMM-only loop of `phase`, or None when it has none."""
    gemm_only = getattr(runner, "gemm_only", None)
    return None if gemm_only is None else gemm_only(phase)


def gemm_and_barrier_call(runner, phase: str) -> Callable[[], None] | None:
    """The runner's loop of GEMMs and barriers of `phase`, or None when it has none."""
    loop = getattr(runner, "gemm_and_barrier", None)
    return None if loop is None else loop(phase)


def split_metrics(
    gemm_call: Callable[[], None],
    phase_median_ms: float,
    *,
    barrier_call: Callable[[], None] | None = None,
    sync: Callable[[], None] = lambda: None,
    device: str = "cpu",
    min_time_s: float = 1.0,
    min_calls: int = 10,
    max_warmup_calls: int = 10,
) -> dict:
    """{"split": {gemm_ms, elementwise_ms, gemm_share, gemm_rel_iqr, gemm_noisy}} from timing
    `gemm_call` against the phase's median (ms) measured by the same protocol; with
    `barrier_call` (the GEMMs and the barriers) also barrier_ms."""
    protocol = {
        "sync": sync,
        "device": device,
        "min_time_s": min_time_s,
        "min_calls": min_calls,
        "max_warmup_calls": max_warmup_calls,
    }
    gemm = benchmark(gemm_call, **protocol)
    gemm_ms = gemm["time_ms"]["median"]
    split = {
        "gemm_ms": gemm_ms,
        "elementwise_ms": phase_median_ms - gemm_ms,
        "gemm_share": gemm_ms / phase_median_ms if phase_median_ms > 0 else None,
        "gemm_rel_iqr": gemm["time_ms"]["rel_iqr"],
        "gemm_noisy": gemm["noisy"],
    }
    if barrier_call is not None:
        with_barriers_ms = benchmark(barrier_call, **protocol)["time_ms"]["median"]
        split["barrier_ms"] = with_barriers_ms - gemm_ms
        split["elementwise_ms"] = phase_median_ms - with_barriers_ms
    return {"split": split}
