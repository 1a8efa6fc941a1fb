"""The timing protocol and its statistics (after torch.utils.benchmark and pyperf).

1. Warm-up: the first call is timed apart (it carries compilation and lazy allocation:
   `compile_s` for variants that compile), then calls repeat until one agrees within 10% with
   the call before it, or `max_calls` calls are made (`warmup_stable` says which). The call
   that agrees is the first timed call: it is measured like every later one, after a call of
   the same time, so only the calls before it are discarded (`warmup_calls`). At a step of
   seconds (the fastrnns shape) that saves a step per job over discarding it too.
2. Timed calls until both `min_time_s` of measured time and `min_calls` calls.
3. Statistics of the per-call times: median, IQR, min, mean, stdev, n; a row is `noisy` when
   IQR / median > 0.10.

A measured call is `call(); sync()` bracketed by `time.perf_counter_ns` on CPU, or by CUDA
events on a GPU. An optional `untimed_setup` (the untimed forward before a timed backward) runs and
syncs before the bracket. Process counters run inside the bracket's stretch only.

`benchmark_segments` runs the same protocol on a call made of consecutive segments (a training
step: forward, backward, update) and times each segment by its own bracket: one loop of calls
gives every phase its samples. The call's time is the sum of its segments; warm-up stability,
min_time_s and min_calls apply to that sum.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

NOISY_IQR_OVER_MEDIAN = 0.10
STABLE_TOLERANCE = 0.10

Call = Callable[[], None]
# One measured call: (measured ns, wall ns including any untimed preparation).
Measure = Callable[[], tuple[int, int]]


def perf_counter_timer(call: Call, sync: Call) -> int:
    """Nanoseconds of `call(); sync()` by the CPU's monotonic performance counter."""
    start = time.perf_counter_ns()
    call()
    sync()
    return time.perf_counter_ns() - start


def cuda_event_timer(call: Call, sync: Call) -> int:
    """Nanoseconds between CUDA events recorded around `call` on the current stream."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    call()
    end.record()
    end.synchronize()
    return round(start.elapsed_time(end) * 1e6)  # elapsed_time is in ms


def timer_for(device: str) -> Callable[[Call, Call], int]:
    return cuda_event_timer if device == "cuda" else perf_counter_timer


def make_measure(
    call: Call,
    *,
    sync: Call = lambda: None,
    untimed_setup: Call | None = None,
    timer: Callable[[Call, Call], int] = perf_counter_timer,
    counters=None,
    clock: Callable[[], int] = time.perf_counter_ns,
) -> Measure:
    """A `Measure` of `call`: untimed_setup + sync untimed, then the timed bracket.

    `counters` (a ProcessCounters, optional) is started and stopped around the bracket only.
    """

    def measure() -> tuple[int, int]:
        wall_start = clock()
        if untimed_setup is not None:
            untimed_setup()
        sync()
        if counters is not None:
            counters.start()
        measured_ns = timer(call, sync)
        if counters is not None:
            counters.stop()
        return measured_ns, clock() - wall_start

    return measure


@dataclass
class WarmUp:
    first_s: float  # wall time of the first call, preparation included
    total_s: float  # wall time of the discarded calls, preparation included
    calls: int  # discarded calls
    stable: bool  # a call agreed with the one before it within STABLE_TOLERANCE
    kept_ns: int | None = None  # that call's measured time: the first timed sample

    def metrics(self, compiles: bool) -> dict:
        metrics = {
            "warmup_s": self.total_s,
            "warmup_calls": self.calls,
            "warmup_stable": self.stable,
            "first_call_s": self.first_s,
        }
        if compiles:
            metrics["compile_s"] = self.first_s
        return metrics


def warm_up(measure: Measure, max_calls: int = 10, tolerance: float = STABLE_TOLERANCE) -> WarmUp:
    """Call until stable: the first call never counts toward stability (compilation, lazy
    buffers); stable once a later call differs by at most `tolerance` from the call before
    it (not the first). That call is kept (`kept_ns`), the ones before it are discarded. At
    most `max_calls` calls in all (at least 3 are needed to be stable); none kept if not stable.
    """
    if max_calls < 1:
        raise ValueError(f"max_calls must be >= 1, got {max_calls}")
    _, first_wall = measure()
    total_wall, previous, calls = first_wall, None, 1
    while calls < max_calls:
        measured, wall = measure()
        if previous is not None and abs(measured - previous) <= tolerance * previous:
            return WarmUp(first_wall / 1e9, total_wall / 1e9, calls, True, measured)
        total_wall += wall
        calls += 1
        previous = measured
    return WarmUp(first_wall / 1e9, total_wall / 1e9, calls, False)


def time_calls(
    measure: Measure, min_time_s: float = 1.0, min_calls: int = 10, first: list[int] = ()
) -> list[int]:
    """Measured nanoseconds per call, until `min_time_s` of measured time and `min_calls`;
    `first`: samples already taken (the warm-up's kept call), counted toward both."""
    samples: list[int] = list(first)
    budget_ns = min_time_s * 1e9
    total = sum(samples)
    while len(samples) < min_calls or total < budget_ns:
        measured, _ = measure()
        samples.append(measured)
        total += measured
    return samples


def quartiles(values: list[float]) -> tuple[float, float, float]:
    """(q1, median, q3) by linear interpolation between order statistics (numpy's default)."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0], ordered[0], ordered[0]
    q1, median, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    return q1, median, q3


def summarize(samples_ns: list[int]) -> dict:
    """`time_ms` statistics of per-call nanoseconds: median, iqr, min, max, mean, stdev, n,
    and rel_iqr = iqr / median."""
    if not samples_ns:
        raise ValueError("no samples to summarize")
    ms = [ns / 1e6 for ns in samples_ns]
    q1, median, q3 = quartiles(ms)
    return {
        "median": median,
        "iqr": q3 - q1,
        "rel_iqr": (q3 - q1) / median if median > 0 else 0.0,
        "min": min(ms),
        "max": max(ms),
        "mean": statistics.fmean(ms),
        "stdev": statistics.stdev(ms) if len(ms) > 1 else 0.0,
        "n": len(ms),
    }


def block_means(samples: list[float], block: int) -> list[float]:
    """Means of consecutive blocks of `block` samples (a trailing partial block left out):
    what a timer that times `block` calls at once and divides sees per measurement."""
    if block < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    return [
        statistics.fmean(samples[start : start + block])
        for start in range(0, len(samples) - block + 1, block)
    ]


def is_noisy(time_ms: dict, threshold: float = NOISY_IQR_OVER_MEDIAN) -> bool:
    """A row is noisy when its spread (IQR / median) exceeds `threshold`."""
    return time_ms["median"] > 0 and time_ms["iqr"] / time_ms["median"] > threshold


def make_segment_measure(
    segments: list[tuple[str, Call]],
    *,
    sync: Call = lambda: None,
    device: str = "cpu",
    counters: dict | None = None,
    clock: Callable[[], int] = time.perf_counter_ns,
) -> Callable[[], list[int]]:
    """A measure of one call made of `segments` [(name, call)]: nanoseconds per segment.

    On CPU each segment is `call(); sync()` in its own perf_counter bracket. On CUDA, events
    between segments and one synchronize at the end: the GPU's queue is not drained between
    segments, as in an untimed training step. `counters` ({name: ProcessCounters}, optional)
    start and stop outside the brackets: on CPU around their own segment, and a counter named
    by no segment around each segment (the whole call's); on CUDA, where the CPU's work on
    one segment overlaps the GPU's on another, every counter around the whole call."""
    names = [name for name, _ in segments]
    counters = counters or {}
    outer = [c for name, c in counters.items() if name not in names]

    def switch(group, on: bool) -> None:
        for counter in group:
            if on:
                counter.start()
            else:
                counter.stop()

    if device == "cuda":
        import torch

        def measure_cuda() -> list[int]:
            sync()
            events = [torch.cuda.Event(enable_timing=True) for _ in range(len(segments) + 1)]
            switch(counters.values(), True)
            events[0].record()
            for (_, call), event in zip(segments, events[1:], strict=True):
                call()
                event.record()
            events[-1].synchronize()
            switch(counters.values(), False)
            return [round(a.elapsed_time(b) * 1e6) for a, b in itertools.pairwise(events)]

        return measure_cuda

    def measure() -> list[int]:
        sync()
        times = []
        for name, call in segments:
            group = [*outer, *([counters[name]] if name in counters else [])]
            switch(group, True)
            start = clock()
            call()
            sync()
            times.append(clock() - start)
            switch(group, False)
        return times

    return measure


def benchmark_segments(
    segments: list[tuple[str, Call]],
    *,
    sync: Call = lambda: None,
    device: str = "cpu",
    compiles: bool = False,
    min_time_s: float = 1.0,
    min_calls: int = 10,
    max_warmup_calls: int = 10,
    counters: dict | None = None,
    total: str = "total",
    clock: Callable[[], int] = time.perf_counter_ns,
    keep_samples: bool = False,
) -> dict[str, dict]:
    """`benchmark`'s protocol on one call made of consecutive `segments` [(name, call)].

    Returns metrics per segment name, and under `total` those of the whole call, whose time
    is the sum of its segments' (the gaps between brackets, where only counters run, are left
    out). Warm-up stability and the stopping rule of the timed calls look at the total; each
    segment's first_call_s, warmup_s and compile_s are its own part of the warm-up calls.
    `counters` ({name: ProcessCounters} for the segments and `total`, optional) add per_call
    and gc to each; `keep_samples` adds each one's samples_ms, every timed call in order."""
    names = [name for name, _ in segments]
    warm_rows: list[list[int]] = []
    rows: list[list[int]] = []

    def as_measure(segment_measure, table: list[list[int]]) -> Measure:
        """The whole call as a `Measure` of warm_up / time_calls, keeping its segment times."""

        def measure() -> tuple[int, int]:
            table.append(segment_measure())
            total_ns = sum(table[-1])
            return total_ns, total_ns

        return measure

    warm_measure = make_segment_measure(segments, sync=sync, device=device, clock=clock)
    warm = warm_up(as_measure(warm_measure, warm_rows), max_warmup_calls)
    if warm.kept_ns is not None:
        rows.append(warm_rows.pop())
    measure = make_segment_measure(
        segments, sync=sync, device=device, counters=counters, clock=clock
    )
    time_calls(as_measure(measure, rows), min_time_s, min_calls, first=[sum(row) for row in rows])
    counted = len(rows) - (warm.kept_ns is not None)

    def columns(table: list[list[int]]) -> dict[str, list[int]]:
        by_name = {name: [row[i] for row in table] for i, name in enumerate(names)}
        by_name[total] = [sum(row) for row in table]
        return by_name

    timed, warm_columns = columns(rows), columns(warm_rows)
    results = {}
    for name, samples in timed.items():
        own = warm_columns[name]
        warm_up_of = WarmUp(own[0] / 1e9, sum(own) / 1e9, warm.calls, warm.stable)
        time_ms = summarize(samples)
        metrics = {"time_ms": time_ms, "noisy": is_noisy(time_ms), **warm_up_of.metrics(compiles)}
        if keep_samples:
            metrics["samples_ms"] = [ns / 1e6 for ns in samples]
        if counters is not None and name in counters:
            metrics.update(_counter_metrics(counters[name], counted, time_ms))
        results[name] = metrics
    return results


def _counter_metrics(counters, calls: int, time_ms: dict) -> dict:
    """Counters per call over the `calls` they ran for (the timed calls after the warm-up's
    kept one, which ran before the counters were on)."""
    per_call = counters.per_call(calls)
    # CPU time over wall time: ~threads when the process had its cores, less when shared.
    cpu_ms = per_call["user_cpu_ms"] + per_call["sys_cpu_ms"]
    per_call["cpu_util"] = cpu_ms / time_ms["mean"] if time_ms["mean"] > 0 else None
    return {"per_call": per_call, "gc": counters.gc.metrics()}


def benchmark(
    call: Call,
    *,
    sync: Call = lambda: None,
    untimed_setup: Call | None = None,
    device: str = "cpu",
    compiles: bool = False,
    min_time_s: float = 1.0,
    min_calls: int = 10,
    max_warmup_calls: int = 10,
    counters=None,
    keep_samples: bool = False,
) -> dict:
    """The whole protocol on one call; returns record metrics (time_ms, noisy, warm-up, and
    `per_call` / `gc` when `counters` is given; `samples_ms`, every timed call in order, with
    `keep_samples`)."""
    timer = timer_for(device)
    warm = warm_up(
        make_measure(call, sync=sync, untimed_setup=untimed_setup, timer=timer), max_warmup_calls
    )
    measure = make_measure(
        call, sync=sync, untimed_setup=untimed_setup, timer=timer, counters=counters
    )
    kept = [] if warm.kept_ns is None else [warm.kept_ns]
    samples = time_calls(measure, min_time_s, min_calls, first=kept)
    time_ms = summarize(samples)
    metrics = {"time_ms": time_ms, "noisy": is_noisy(time_ms), **warm.metrics(compiles)}
    if keep_samples:
        metrics["samples_ms"] = [ns / 1e6 for ns in samples]
    if counters is not None:
        metrics.update(_counter_metrics(counters, len(samples) - len(kept), time_ms))
    return metrics
