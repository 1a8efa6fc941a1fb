"""Timing statistics and the warm-up rule, on synthetic samples and a scripted clock."""

import pytest

from rnnopt.measure import timing
from rnnopt.measure.counters import ProcessCounters
from rnnopt.measure.timing import (
    benchmark,
    benchmark_segments,
    block_means,
    is_noisy,
    make_measure,
    summarize,
    time_calls,
    warm_up,
)


def scripted(durations_ns):
    """A Measure returning the given (measured, wall) nanoseconds in turn."""
    values = iter(durations_ns)
    return lambda: (lambda d: (d, d))(next(values))


def test_summarize_synthetic_sample():
    stats = summarize([ms * 1_000_000 for ms in (1, 2, 3, 4, 5, 6, 7, 8, 9)])
    assert stats["median"] == 5
    assert stats["iqr"] == pytest.approx(7 - 3)  # linear quartiles: q1 = 3, q3 = 7
    assert stats["min"] == 1 and stats["max"] == 9
    assert stats["mean"] == 5
    assert stats["n"] == 9
    assert stats["stdev"] == pytest.approx(2.7386, abs=1e-4)
    assert stats["rel_iqr"] == pytest.approx(0.8)


def test_noisy_flag():
    quiet = summarize([100, 101, 99, 100, 102, 98, 100])
    spread = summarize([100, 150, 60, 100, 140, 70, 100])
    assert not is_noisy(quiet)
    assert is_noisy(spread)


def test_single_sample():
    assert summarize([2_000_000]) == {
        "median": 2.0,
        "iqr": 0.0,
        "rel_iqr": 0.0,
        "min": 2.0,
        "max": 2.0,
        "mean": 2.0,
        "stdev": 0.0,
        "n": 1,
    }


def test_warm_up_first_call_apart_then_stable():
    # first call (compilation) is never compared; 50 -> 40 differ by 20%, 40 -> 39 by 2.5%:
    # the 39 is kept as the first timed sample, the three calls before it are discarded
    warm = warm_up(scripted([1000, 50, 40, 39, 39, 39]), max_calls=10)
    assert warm.stable
    assert warm.calls == 3 and warm.kept_ns == 39
    assert warm.first_s == 1000 / 1e9
    assert warm.total_s == (1000 + 50 + 40) / 1e9
    assert warm.metrics(compiles=True)["compile_s"] == warm.first_s
    assert "compile_s" not in warm.metrics(compiles=False)


def test_warm_up_bounded_when_never_stable():
    warm = warm_up(scripted([100, 10, 20, 10, 20, 10, 20, 10]), max_calls=5)
    assert not warm.stable
    assert warm.calls == 5 and warm.kept_ns is None
    assert warm.total_s == (100 + 10 + 20 + 10 + 20) / 1e9


def test_warm_up_never_compares_with_the_first_call():
    # 100 -> 100 agree, but the first call is apart: the third call is the earliest kept
    warm = warm_up(scripted([100, 100, 100]), max_calls=10)
    assert warm.stable and warm.calls == 2 and warm.kept_ns == 100
    assert not warm_up(scripted([100, 100]), max_calls=2).stable


def test_benchmark_times_the_call_that_showed_stability_first(monkeypatch):
    # measured ns per call: warm-up 900 (first), 500, 300 (vs 500: not stable), 290 (kept);
    # then 280, 310 timed with the counters on
    durations = iter([900, 500, 300, 290, 280, 310])
    monkeypatch.setattr(timing, "timer_for", lambda device: lambda call, sync: next(durations))
    counted = []
    per_call = ProcessCounters.per_call
    monkeypatch.setattr(
        ProcessCounters, "per_call", lambda self, calls: counted.append(calls) or per_call(self, 1)
    )
    with ProcessCounters() as counters:
        metrics = benchmark(
            lambda: None, min_time_s=0, min_calls=3, max_warmup_calls=10, counters=counters
        )
    assert metrics["warmup_calls"] == 3 and metrics["warmup_stable"]
    assert metrics["time_ms"]["n"] == 3
    assert metrics["time_ms"]["median"] == 290 / 1e6
    assert metrics["time_ms"]["min"] == 280 / 1e6 and metrics["time_ms"]["max"] == 310 / 1e6
    assert counted == [2]  # the kept call ran before the counters were on


def test_time_calls_needs_both_min_time_and_min_calls():
    # 0.4 s per call: 3 calls reach 1 s, but 5 calls are required
    assert len(time_calls(scripted([400_000_000] * 10), min_time_s=1.0, min_calls=5)) == 5
    # 1 ms per call: 2 calls required, 0.01 s needs 10
    assert len(time_calls(scripted([1_000_000] * 20), min_time_s=0.01, min_calls=2)) == 10


def test_make_measure_keeps_preparation_out_of_the_bracket():
    events = []
    fake_timer = lambda call, sync: (call(), sync(), 7)[2]  # noqa: E731
    ticks = iter([100, 130])
    measure = make_measure(
        lambda: events.append("call"),
        sync=lambda: events.append("sync"),
        untimed_setup=lambda: events.append("setup"),
        timer=fake_timer,
        clock=lambda: next(ticks),
    )
    assert measure() == (7, 30)
    assert events == ["setup", "sync", "call", "sync"]


def test_benchmark_protocol_on_a_real_call():
    calls = []
    with ProcessCounters() as counters:
        metrics = benchmark(
            lambda: calls.append(sum(range(1000))),
            min_time_s=0.001,
            min_calls=5,
            max_warmup_calls=4,
            counters=counters,
        )
    assert metrics["time_ms"]["n"] >= 5
    assert len(calls) == metrics["time_ms"]["n"] + metrics["warmup_calls"]
    assert set(metrics["per_call"]) == {
        "minor_faults",
        "major_faults",
        "user_cpu_ms",
        "sys_cpu_ms",
        "cpu_util",
    }
    assert set(metrics["gc"]) == {"gen0", "gen1", "gen2", "pause_ms"}


def test_block_means_group_consecutive_samples():
    assert block_means([1.0, 3.0, 5.0, 7.0, 100.0], 2) == [2.0, 6.0]  # partial block left out
    assert block_means([4.0, 5.0], 1) == [4.0, 5.0]
    # one slow call in ten lifts its block's mean far above the per-call median
    samples = [1.0] * 9 + [11.0]
    assert block_means(samples, 10) == [2.0]
    with pytest.raises(ValueError):
        block_means(samples, 0)


class SegmentClock:
    """A clock that only the segments move: each call advances it by its own duration."""

    def __init__(self):
        self.now = 0
        self.events = []

    def __call__(self):
        return self.now

    def segment(self, name, ns):
        def call():
            self.events.append(name)
            self.now += ns

        return name, call


class LoggedCounter:
    def __init__(self, name, log):
        self.name, self.log, self.starts = name, log, 0

    def start(self):
        self.log.append(f"start {self.name}")
        self.starts += 1

    def stop(self):
        self.log.append(f"stop {self.name}")


def test_benchmark_segments_times_each_segment_and_the_step_as_their_sum(monkeypatch):
    clock = SegmentClock()
    segments = [
        clock.segment("forward", 3_000_000),
        clock.segment("backward", 5_000_000),
        clock.segment("update", 1_000_000),
    ]
    # the counters only record what they are told; their gc part is the real one
    monkeypatch.setattr(ProcessCounters, "start", lambda self: clock.events.append("c+"))
    monkeypatch.setattr(ProcessCounters, "stop", lambda self: clock.events.append("c-"))
    with ProcessCounters() as fwd, ProcessCounters() as bwd, ProcessCounters() as step:
        metrics = benchmark_segments(
            segments,
            min_time_s=0.05,  # 9 ms per step: 6 steps reach it, more than min_calls
            min_calls=4,
            max_warmup_calls=4,
            counters={"forward": fwd, "backward": bwd, "step": step},
            total="step",
            clock=clock,
        )
    assert set(metrics) == {"forward", "backward", "update", "step"}
    assert metrics["forward"]["time_ms"]["median"] == 3
    assert metrics["backward"]["time_ms"]["median"] == 5
    assert metrics["step"]["time_ms"]["median"] == 9  # the sum of its segments
    assert {m["time_ms"]["n"] for m in metrics.values()} == {6}
    # warm-up: the first step, then two that agree, the second of them kept as the first
    # timed step (5 more reach 0.05 s); each segment keeps its own share of the discarded two
    assert metrics["step"]["warmup_calls"] == 2 and metrics["step"]["warmup_stable"]
    assert metrics["backward"]["first_call_s"] == 5e-3
    assert metrics["step"]["warmup_s"] == pytest.approx(2 * 9e-3)
    assert "per_call" in metrics["forward"] and "per_call" not in metrics["update"]
    # warm-up calls run without counters; each timed segment inside its own counter and the
    # step's, switched outside the segment's bracket
    warm, timed = clock.events[:9], clock.events[9:]
    assert warm == ["forward", "backward", "update"] * 3
    assert timed[:11] == [
        "c+",
        "c+",
        "forward",
        "c-",
        "c-",
        "c+",
        "c+",
        "backward",
        "c-",
        "c-",
        "c+",
    ]
    assert timed.count("update") == 5 and timed.count("c+") == 5 * 5


def test_benchmark_segments_stops_on_the_step_total():
    clock = SegmentClock()
    segments = [clock.segment("forward", 200_000_000), clock.segment("update", 200_000_000)]
    metrics = benchmark_segments(
        segments, min_time_s=1.0, min_calls=2, max_warmup_calls=1, clock=clock
    )
    # 0.4 s per step: 3 steps reach 1 s although each segment alone would need 5
    assert metrics["total"]["time_ms"]["n"] == 3
    assert metrics["total"]["warmup_calls"] == 1 and not metrics["total"]["warmup_stable"]
