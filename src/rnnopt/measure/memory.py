"""The memory protocol: what a phase call allocates, by three instruments that see different
things. Run in a fresh process, apart from timing, so that sampling never slows a timing.

- RSS (memory_profiler, sampled every ~1 ms by a forked sampler process): the resident set of
  the process, numpy and torch alike, over a fresh runner's first call and a few more. Short
  peaks between samples escape it, so the kernel's own high-water mark (getrusage ru_maxrss)
  is read before and after as a check. Memory freed to glibc but not to the OS stays resident:
  RSS is an upper bound on live bytes.
- tracemalloc: Python objects and numpy buffers (numpy registers its data allocations in
  domain `np.lib.tracemalloc_domain`); torch's allocations are invisible to it. Measured on
  one steady-state call: the traced peak above the start, and the numpy buffers the call
  allocates and keeps (a snapshot diff while the runner's previous state is held alive, so
  that state replaced by the call is not freed and does not cancel out the new one).
- torch.cuda peak statistics for runners on a GPU (the RSS of a GPU process says little).

The peak compared with the analytic minimum is that of a fresh runner's first call: what one
call needs, its lazily allocated workspaces included. Later calls may add what a runner keeps
from the previous call while the next one builds its own (the window's increment shows it).
"""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable

import numpy as np
import psutil
from memory_profiler import memory_usage

from rnnopt.measure.counters import GcMonitor, maxrss_mib

MIB = 2**20
MAX_SERIES_POINTS = 500


def downsample_max(times: list[float], values: list[float], max_points: int = MAX_SERIES_POINTS):
    """At most `max_points` points: each bucket of consecutive samples keeps its maximum
    value (so that peaks survive) at the bucket's first time."""
    if len(values) <= max_points:
        return list(times), list(values)
    edges = np.linspace(0, len(values), max_points + 1).astype(int)
    kept_times, kept_values = [], []
    for start, stop in zip(edges[:-1], edges[1:], strict=True):
        if stop > start:
            kept_times.append(times[start])
            kept_values.append(max(values[start:stop]))
    return kept_times, kept_values


def rss_mib() -> float:
    return psutil.Process().memory_info().rss / MIB


def rss_profile(calls: list[Callable[[], None]], interval_s: float = 0.001) -> dict:
    """Run `calls` in order under memory_profiler's RSS sampler.

    Returns baseline_mib (RSS just before), peak_mib (absolute), increment_mib (peak over
    baseline), first_call_increment_mib (peak up to the end of the first call), samples, and
    the series t_s (seconds from the start), rss_mib and call_end_t_s.
    """
    call_ends: list[float] = []

    def run_all() -> None:
        for call in calls:
            call()
            call_ends.append(time.time())  # memory_profiler stamps samples with time.time()

    baseline = rss_mib()
    samples = memory_usage(
        (run_all, (), {}),
        interval=interval_s,
        timestamps=True,
        include_children=False,
        max_usage=False,
        max_iterations=1,  # never rerun the calls when they were too quick to sample
    )
    values = [mib for mib, _ in samples]
    stamps = [stamp for _, stamp in samples]
    start = stamps[0]
    first_end = call_ends[0]
    first_values = [mib for mib, stamp in samples if stamp <= first_end] or values[:2]
    peak = max(values)
    t_s, rss = downsample_max([s - start for s in stamps], values)
    return {
        "baseline_mib": baseline,
        "peak_mib": peak,
        "increment_mib": max(peak - baseline, 0.0),
        "first_call_increment_mib": max(max(first_values) - baseline, 0.0),
        "samples": len(values),
        "series": {
            "rss_t_s": t_s,
            "rss_mib": rss,
            "call_end_t_s": [end - start for end in call_ends],
        },
    }


def _numpy_buffers(snapshot: tracemalloc.Snapshot) -> tracemalloc.Snapshot:
    return snapshot.filter_traces([tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)])


def traced_call(call: Callable[[], None], state: object, seq_len: int) -> dict:
    """tracemalloc over one call: peak traced bytes above the start, and the numpy buffers
    allocated and still alive after it, with the previous state of `state` (the runner)
    held, in total and per time step.

    A call that reuses preallocated buffers shows ~0 buffers per step; one that allocates
    per step shows at least one per step.
    """
    held = dict(getattr(state, "__dict__", {}))  # keeps replaced state alive across the call
    started_here = not tracemalloc.is_tracing()
    if started_here:
        tracemalloc.start()
    try:
        before = _numpy_buffers(tracemalloc.take_snapshot())
        tracemalloc.reset_peak()
        current_before, _ = tracemalloc.get_traced_memory()
        call()
        _, peak = tracemalloc.get_traced_memory()
        after = _numpy_buffers(tracemalloc.take_snapshot())
    finally:
        if started_here:
            tracemalloc.stop()
    new_blocks = new_bytes = 0
    for stat in after.compare_to(before, "traceback"):
        if stat.count_diff > 0:
            new_blocks += stat.count_diff
            new_bytes += max(stat.size_diff, 0)
    del held
    peak_bytes = max(peak - current_before, 0)
    return {
        "peak_bytes": peak_bytes,
        "peak_bytes_per_step": peak_bytes / seq_len,
        "numpy_blocks": new_blocks,
        "numpy_blocks_per_step": new_blocks / seq_len,
        "numpy_bytes_per_step": new_bytes / seq_len,
    }


class CudaPeaks:
    """torch.cuda allocator peaks since construction, relative to what was allocated then."""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        self.baseline = torch.cuda.memory_allocated()

    def read(self) -> dict:
        cuda = self.torch.cuda
        cuda.synchronize()
        return {
            "baseline_allocated_mib": self.baseline / MIB,
            "peak_allocated_mib": (cuda.max_memory_allocated() - self.baseline) / MIB,
            "peak_reserved_mib": cuda.max_memory_reserved() / MIB,
        }


TRACEMALLOC_BLIND = "tracemalloc does not see torch's allocations: its figures cover Python only"


EXPLAIN_ABOVE = 1.5  # peak / analytic minimum above this: the record says where the rest goes


def explain(variant, analytic: dict, heap: dict, ratio: float | None) -> str | None:
    """Where the peak goes beyond the analytic minimum, when it is more than EXPLAIN_ABOVE x."""
    if ratio is None or ratio <= EXPLAIN_ABOVE:
        return None
    copies_mib = (analytic["inputs_bytes"] + analytic["params_bytes"]) / MIB
    parts = [
        f"{ratio:.1f}x the minimum: the runner's own copies of inputs and weights "
        f"({copies_mib:.1f} MiB, analytic)"
    ]
    if variant.memory_note:
        parts.append(variant.memory_note)
    parts.append(f"{heap['kept_mib']:.1f} MiB kept between steps")
    return "; ".join(parts)


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
