"""The timer cross-check: torch.utils.benchmark.Timer on the closure rnnopt's harness times, and
its blocked median beside ours."""

from __future__ import annotations

AGREEMENT = 0.10


def timer_summary(measurement) -> dict:
    """A torch Measurement in our units: median and IQR per call in ms."""
    return {
        "median_ms": measurement.median * 1e3,
        "iqr_ms": measurement.iqr * 1e3,
        "measurements": len(measurement.times),
        "calls_per_measurement": measurement.number_per_run,
    }


def torch_timer(call, sync, threads: int, run_time_s: float) -> dict:
    """Timer's two estimates, each given `run_time_s` of calls (adaptive: up to 2x that)."""
    from torch.utils.benchmark import Timer

    timer = Timer(
        stmt="call(); sync()",
        globals={"call": call, "sync": sync},
        num_threads=threads,
        label="rnnopt timer-check",
    )
    return {
        "blocked": timer_summary(timer.blocked_autorange(min_run_time=run_time_s)),
        "adaptive": timer_summary(
            timer.adaptive_autorange(threshold=AGREEMENT, max_run_time=2 * run_time_s)
        ),
    }
