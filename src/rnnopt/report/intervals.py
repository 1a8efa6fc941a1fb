"""Ratios of times with confidence intervals that carry the variation between processes, and
the rule that turns an interval into a verdict.

The unit of replication is the process. Calls inside one process share its memory layout, its
kernel choices and the host's state while it ran, so they say little about the next process:
intervals built from one process's calls excluded the next run's median for more than half the
speedups (issue 24). So each process is summarised by one time (rnnopt.report.wide.PROCESS_TIME:
the 10th percentile of its calls), and a side of a comparison is the list of its processes'
times.

Method (a two-stage analysis of nested samples): the ratio is exp(mean log a - mean log b), the
ratio of the two sides' geometric means of process times; its interval is Welch's t interval
of the difference of mean logs (Welch-Satterthwaite degrees of freedom), exponentiated. It needs
at least two processes a side: with one there is no between-process spread, so no interval and
no verdict. With three processes a side the t quantile is large (2.8 at 4 degrees of freedom,
4.3 at 2, where one side's three times happen to agree): intervals are honest rather than
narrow.

The verdict rule (after asv's --factor and criterion's noise threshold), for a speedup s with a
practical-significance threshold t: "faster" when the whole interval lies above 1 + t, "slower"
when it lies below 1 / (1 + t), "no meaningful difference" when it lies inside
[1 / (1 + t), 1 + t], and "inconclusive" otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
THRESHOLD = 0.05

FASTER, SLOWER, SAME, INCONCLUSIVE = "faster", "slower", "no meaningful difference", "inconclusive"


@dataclass(frozen=True)
class Interval:
    """A ratio with its confidence interval; low and high are None without one (one process)."""

    median: float  # the estimate (a ratio of geometric means of process times)
    low: float | None = None
    high: float | None = None
    processes: tuple[int, int] = (1, 1)  # processes of the numerator's and denominator's side
    # The Welch interval's standard error of the log ratio and its degrees of freedom (None
    # for an interval not built by ratio_interval): what change_interval combines.
    se: float | None = None
    df: float | None = None

    @property
    def has_interval(self) -> bool:
        return self.low is not None and self.high is not None

    @property
    def n(self) -> int:
        """Processes of the side with fewer: what the interval rests on."""
        return min(self.processes)

    def __str__(self) -> str:
        if not self.has_interval:
            return f"{self.median:.2f}x"
        return f"{self.median:.2f}x ({self.low:.2f}-{self.high:.2f})"


def _logs(values: Sequence[float]) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):  # zero or negative: left out below
        logs = np.log(np.asarray(values, dtype=float))
    return logs[np.isfinite(logs)]


def ratio_interval(
    numerator: Sequence[float], denominator: Sequence[float], confidence: float = CONFIDENCE
) -> Interval | None:
    """numerator / denominator (a speedup: baseline times over candidate times) from each
    side's process medians, with its Welch interval; None when a side has no positive value."""
    top, bottom = _logs(numerator), _logs(denominator)
    if len(top) == 0 or len(bottom) == 0:
        return None
    estimate = float(np.exp(top.mean() - bottom.mean()))
    processes = (len(top), len(bottom))
    if min(processes) < 2:
        return Interval(estimate, processes=processes)
    var_top, var_bottom = top.var(ddof=1) / len(top), bottom.var(ddof=1) / len(bottom)
    variance = var_top + var_bottom
    df = (
        math.inf
        if variance == 0
        else variance**2 / (var_top**2 / (len(top) - 1) + var_bottom**2 / (len(bottom) - 1))
    )
    return _welch(estimate, variance, df, processes, confidence)


def _quantile(confidence: float, df: float) -> float:
    """The two-sided t quantile of `confidence` at df degrees of freedom."""
    return float(stats.t.ppf(0.5 + confidence / 2, df))


def _welch(
    estimate: float, variance: float, df: float, processes: tuple[int, int], confidence: float
) -> Interval:
    """The interval estimate x exp(+-t_q(df) se) of a log ratio with `variance` (se^2); a
    point where the variance is 0."""
    se = math.sqrt(variance)
    half = _quantile(confidence, df) * se
    low, high = estimate * math.exp(-half), estimate * math.exp(half)
    return Interval(estimate, low, high, processes, se, float(df))


def change_interval(
    before: Interval, after: Interval, confidence: float = CONFIDENCE
) -> Interval | None:
    """after / before for two independent ratios (one speedup in two runs), with the Welch
    interval of the difference of their logs: variances add, degrees of freedom by
    Welch-Satterthwaite from each side's. None unless both come from ratio_interval."""
    if before.se is None or after.se is None or before.median <= 0 or after.median <= 0:
        return None
    variance = before.se**2 + after.se**2
    df = (
        math.inf
        if variance == 0
        else variance**2 / (before.se**4 / before.df + after.se**4 / after.df)
    )
    processes = (min(after.processes), min(before.processes))
    return _welch(after.median / before.median, variance, df, processes, confidence)


def geometric_mean(values: Sequence[float]) -> float:
    logs = _logs(values)
    return float(np.exp(logs.mean())) if len(logs) else math.nan


def classify(interval: Interval, threshold: float = THRESHOLD) -> str | None:
    """faster / slower / no meaningful difference / inconclusive; None without an interval."""
    if not interval.has_interval:
        return None
    upper, lower = 1 + threshold, 1 / (1 + threshold)
    if interval.low > upper:
        return FASTER
    if interval.high < lower:
        return SLOWER
    if interval.low >= lower and interval.high <= upper:
        return SAME
    return INCONCLUSIVE


def processes_to_decide(
    interval: Interval,
    threshold: float = THRESHOLD,
    confidence: float = CONFIDENCE,
    most: int = 20,
) -> int | None:
    """Processes a side that would decide an inconclusive interval if its estimate and the
    spread between processes stayed as they are: the fewest, up to `most`; None when even
    `most` would not (the estimate sits on the threshold, or too near it for the spread).

    Deciding needs a half-width (in log) below the estimate's distance to the nearer bound,
    log(1 + t): beyond it for faster / slower, inside it for no meaningful difference. The
    half-width shrinks as t_q(df) / sqrt(n); df is taken as 2 (n - 1), that of two sides of
    equal spread, which never overstates the shrinking of the quantile."""
    if not interval.has_interval:
        return None
    n = interval.n
    centre, half = math.log(interval.median), math.log(interval.high / interval.median)
    margin = abs(abs(centre) - math.log(1 + threshold))
    if half < margin:
        return n
    if margin == 0:
        return None

    now = _quantile(confidence, 2 * (n - 1))
    for more in range(n + 1, most + 1):
        if half * _quantile(confidence, 2 * (more - 1)) / now * math.sqrt(n / more) < margin:
            return more
    return None
