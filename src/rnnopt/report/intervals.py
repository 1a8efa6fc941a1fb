"""Ratios of times with confidence intervals that carry the variation between processes, and
the rule that turns an interval into a verdict.

The unit of replication is the process. Calls inside one process share its memory layout, its
kernel choices and the host's state while it ran, so they say little about the next process:
intervals built from one process's calls excluded the next run's median for more than half the
speedups (issue 24). So each process is summarised by one time (rnnopt.report.wide.PROCESS_TIME:
the 2nd percentile of its calls), and a side of a comparison is the list of its processes'
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
from dataclasses import dataclass, replace

import numpy as np
from scipy import optimize, stats

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
    # The between-run standard deviation of the log ratio that se includes (with_run_spread),
    # and the degrees of freedom of its estimate; 0 for an interval over one run's processes.
    run_sd: float = 0.0
    run_df: float | None = None
    # Processes of the numerator's and denominator's side that a slow spell of the host slowed
    # and that the interval still rests on (kept to leave a job two: wide.undisturbed).
    spell_slowed: tuple[int, int] = (0, 0)
    # The degrees of freedom of the processes' own interval, before with_run_spread widened it
    # (None where it was not widened: then df is theirs).
    process_df: float | None = None
    # The speedup pooled over this host's reference runs (with_reference), how many runs it
    # pools, and whether this run's speedup agrees with it (lies in its prediction interval;
    # None where no check was possible). The verdict reads the reference where it agrees.
    reference: Interval | None = None
    reference_runs: int = 0
    agrees: bool | None = None

    @property
    def judged(self) -> Interval:
        """The interval the verdict reads: the reference runs' pooled one where this run
        agrees with it, this run's otherwise."""
        return self.reference if self.reads_reference else self

    @property
    def reads_reference(self) -> bool:
        """Whether the verdict reads the reference runs' pooled interval (this run agrees)."""
        return bool(self.agrees) and self.reference is not None

    @property
    def has_interval(self) -> bool:
        return self.low is not None and self.high is not None

    def spell_could_make(self, found: str | None) -> bool:
        """Whether slow spells could have made the classification `found`: a spell only
        slows, so one on the numerator's side (the baseline of a speedup) moves the ratio up,
        one on the denominator's side down. "faster" then rests on nothing if the numerator's
        side was slowed, "slower" if the denominator's was, "no meaningful difference" if
        either was; the other direction only makes the finding conservative."""
        up, down = (n > 0 for n in self.spell_slowed)
        return (
            (found == FASTER and up)
            or (found == SLOWER and down)
            or (found == SAME and (up or down))
        )

    @property
    def n(self) -> int:
        """Processes of the side with fewer: what the interval rests on."""
        return min(self.processes)

    def __str__(self) -> str:
        return self.text()

    def text(self, digits: int = 2) -> str:
        """'1.09x (1.06-1.12)' at `digits` decimals; the estimate alone without an interval."""
        if not self.has_interval:
            return f"{self.median:.{digits}f}x"
        return f"{self.median:.{digits}f}x ({self.low:.{digits}f}-{self.high:.{digits}f})"

    def shown(self, digits: int = 2) -> str:
        """What a verdict names: this run's interval (at `digits` decimals), and the reference
        runs' where the verdict reads theirs (at least three decimals: pooled intervals are
        narrow, and at two a low bound of 1.052 would print as the threshold itself)."""
        if not self.reads_reference:
            return self.text(digits)
        return (
            f"{self.reference.text(max(3, digits))} over this host's {self.reference_runs} "
            f"reference runs, this run {self.text(digits)}"
        )

    def against_reference(self) -> str:
        """'1.10x (1.08-1.12) against 1.052x (1.047-1.057)': this run's interval beside the
        reference runs' pooled one (with_reference), where it differs from them."""
        return f"{self} against {self.reference.text(3)}"

    def digits_apart(self, bound: float, fewest: int = 2) -> int:
        """The fewest decimals (at least `fewest`, at most 6) at which neither end of this
        interval prints as `bound`: 0.6996 < 0.7 would print "0.700 < 0.7" at three."""
        ends = [end for end in (self.low, self.high) if end is not None]
        for digits in range(fewest, 7):
            if all(f"{end:.{digits}f}" != f"{bound:.{digits}f}" for end in ends):
                return digits
        return 6


def differs_from_reference(runs: int, against: Sequence[str]) -> str:
    """What a verdict judged on its own run says where that run differs from `runs` reference
    runs (with_reference's agrees False): each of `against` (Interval.against_reference,
    labelled where there are several)."""
    return (
        f" (this run differs from this host's {runs} reference runs, "
        f"{'; '.join(against)}: judged on its own)"
    )


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
    df = _satterthwaite([(var_top, len(top) - 1), (var_bottom, len(bottom) - 1)])
    return _welch(estimate, var_top + var_bottom, df, processes, confidence)


def paired_ratio_interval(
    numerator: Sequence[float], denominator: Sequence[float], confidence: float = CONFIDENCE
) -> Interval | None:
    """numerator / denominator from pairs measured side by side (numerator[k] next to
    denominator[k], so a drift of the host moves both): the geometric mean of the pairs'
    ratios with the t interval of their mean log on n - 1 degrees of freedom; None without a
    pair of positive values."""
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.log(np.asarray(numerator, dtype=float) / np.asarray(denominator, dtype=float))
    logs = logs[np.isfinite(logs)]
    if len(logs) == 0:
        return None
    estimate = float(np.exp(logs.mean()))
    pairs = (len(logs), len(logs))
    if len(logs) < 2:
        return Interval(estimate, processes=pairs)
    return _welch(estimate, logs.var(ddof=1) / len(logs), len(logs) - 1, pairs, confidence)


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


def log_interval(
    estimate: float, se: float, df: float, processes: tuple[int, int], confidence: float
) -> Interval:
    """The Welch interval of a ratio given its log's standard error and degrees of freedom
    (what ratio_interval found, read back from a table)."""
    return _welch(estimate, se**2, df, processes, confidence)


def change_interval(
    before: Interval, after: Interval, confidence: float = CONFIDENCE
) -> Interval | None:
    """after / before for two independent ratios (one speedup in two runs), with the Welch
    interval of the difference of their logs: variances add, degrees of freedom by
    Welch-Satterthwaite from each side's. None unless both come from ratio_interval."""
    if before.se is None or after.se is None or before.median <= 0 or after.median <= 0:
        return None
    variance = before.se**2 + after.se**2
    df = _satterthwaite([(before.se**2, before.df), (after.se**2, after.df)])
    processes = (min(after.processes), min(before.processes))
    return _welch(after.median / before.median, variance, df, processes, confidence)


def _satterthwaite(parts: Sequence[tuple[float, float]]) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of variances, each with its own."""
    total = sum(variance for variance, _ in parts)
    spread = sum(variance**2 / df for variance, df in parts if variance > 0)
    return math.inf if spread == 0 else total**2 / spread


def between_run_sd(log_ratios: Sequence[float], se_logs: Sequence[float]) -> float:
    """The between-run standard deviation of a log ratio measured in several runs, each with its
    within-run standard error: DerSimonian and Laird's method of moments, each run weighted by
    1 / se^2: tau^2 = max(0, (Q - (K - 1)) / (sum w - sum w^2 / sum w)), Q the weighted sum of
    squares about the weighted mean. With equal errors it is var(y) - se^2. Unweighted
    (var(y) - mean(se^2)), one spell-widened run's se^2 outweighed the disagreement of the
    quiet ones: over runs AA-AH the spread read 0 for most pairs, and quiet runs' intervals
    missed each other's medians."""
    y, se = np.asarray(log_ratios, dtype=float), np.asarray(se_logs, dtype=float)
    if len(y) < 2:
        return 0.0
    if not np.all(np.isfinite(se) & (se > 0)):  # a run without an error: unweighted
        return math.sqrt(max(0.0, float(np.var(y, ddof=1)) - float(np.nanmean(se**2))))
    w = 1.0 / se**2
    mean = float(np.sum(w * y) / np.sum(w))
    q = float(np.sum(w * (y - mean) ** 2))
    scale = float(np.sum(w) - np.sum(w**2) / np.sum(w))
    return math.sqrt(max(0.0, (q - (len(y) - 1)) / scale))


def with_run_spread(
    interval: Interval, run_sd: float, run_df: float, confidence: float = CONFIDENCE
) -> Interval:
    """A ratio_interval widened by the between-run spread of its log ratio on this host: the
    variance run_sd^2 (estimated from run_df + 1 runs: rnnopt.report.rerun_spread) adds to the
    processes' se^2, degrees of freedom by Welch-Satterthwaite (the processes' own where that
    would narrow the interval). What one run's processes cannot show: a shift shared by every
    process of a run (docs/intervals.md, "Between runs")."""
    if interval.se is None or interval.df is None or run_sd <= 0:
        return interval
    within = interval.se**2
    variance = within + run_sd**2
    df = _satterthwaite([(within, interval.df), (run_sd**2, run_df)])
    # Satterthwaite's df can exceed the processes' own (few processes, a well-measured spread)
    # and shrink the quantile by more than the variance grows: never narrower than before, and
    # no wider either. The processes' own df on the whole variance did that (run T: two
    # processes a side, one side's equal, df 1: 2.92x (0.91-9.40) where the processes alone
    # gave 2.92x (2.06-4.14)); the df whose quantile gives the processes' own half-width does.
    before = _quantile(confidence, interval.df) * interval.se
    if _quantile(confidence, df) * math.sqrt(variance) < before:
        df = _df_of_quantile(before / math.sqrt(variance), interval.df, df, confidence)
    widened = _welch(interval.median, variance, df, interval.processes, confidence)
    return replace(widened, run_sd=run_sd, run_df=run_df, process_df=interval.df)


def pooled_runs(
    log_ratios: Sequence[float], se_logs: Sequence[float], run_sd: float
) -> tuple[float, float]:
    """The random-effects pooled log speedup of several runs and its standard error: each run
    weighted by 1 / (se_k^2 + tau^2), tau = run_sd (between_run_sd), the weighted mean and
    1 / sqrt(sum of the weights). Runs without an error count with tau alone (NaN: none)."""
    y, se = np.asarray(log_ratios, dtype=float), np.asarray(se_logs, dtype=float)
    variance = np.where(np.isfinite(se), se**2, 0.0) + run_sd**2
    if len(y) == 0 or not np.all(variance > 0):
        return math.nan, math.nan
    w = 1.0 / variance
    return float(np.sum(w * y) / np.sum(w)), float(1.0 / math.sqrt(np.sum(w)))


def with_reference(
    interval: Interval,
    mean_log: float,
    mean_se: float,
    runs: int,
    confidence: float = CONFIDENCE,
) -> Interval:
    """`interval` (this run's, widened by the host's between-run spread: with_run_spread)
    with the speedup pooled over `runs` reference runs of its host (pooled_runs: exp(mean_log)
    with the t interval of mean_se on runs - 1 degrees of freedom), and whether this run agrees
    with them: its log speedup lies within the prediction interval of a new run, mean_log +-
    t(df) sqrt(se^2 + mean_se^2), df by Welch-Satterthwaite. Where it agrees, the verdict reads
    the pooled interval: the widened interval of one run and the pooled one of many estimate
    the same quantity, the host's speedup, and many runs measure it better, so a rerun no
    longer moves a verdict near the threshold (docs/intervals.md, "Verdicts from the reference
    runs"). Where it does not, something changed (code, libraries, a shift of the host) and the
    run is judged on its own."""
    if runs < 2 or not (math.isfinite(mean_log) and math.isfinite(mean_se) and mean_se > 0):
        return interval
    ref_df = runs - 1
    pooled = _welch(math.exp(mean_log), mean_se**2, ref_df, interval.processes, confidence)
    agrees = None
    if interval.se is not None and interval.df is not None and interval.median > 0:
        variance = interval.se**2 + mean_se**2
        df = _satterthwaite([(interval.se**2, interval.df), (mean_se**2, ref_df)])
        gap = abs(math.log(interval.median) - mean_log)
        agrees = bool(gap <= _quantile(confidence, df) * math.sqrt(variance))
    return replace(interval, reference=pooled, reference_runs=runs, agrees=agrees)


def _df_of_quantile(quantile: float, low: float, high: float, confidence: float) -> float:
    """The degrees of freedom in [low, high] whose t quantile at `confidence` is `quantile`
    (the quantile falls as df grows; its value at low lies above, at high below)."""
    if math.isinf(high):
        high = 1e9
    return float(optimize.brentq(lambda df: _quantile(confidence, df) - quantile, low, high))


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


def run_spread_keeps_open(
    interval: Interval, threshold: float = THRESHOLD, confidence: float = CONFIDENCE
) -> bool:
    """Whether the between-run part alone keeps the interval across the threshold whatever
    this run's processes would settle on: with infinitely many processes its half-width (in
    log) would still be k = t_q(run_df) x run_sd, so a run whose own value lies within k of a
    bound stays undecided. The run's own value is known only to the processes' own interval
    (the widened one's se without run_sd, on their degrees of freedom); the verdict is kept
    open only when all of that interval lies within k of one bound. Judged at the estimate
    alone, one slow process that pulled the estimate towards a bound kept out the processes
    that would have pulled it back (run AQ: TorchScript 1.09x, one jit process 11% slower than
    its other two; the host's other runs 1.08-1.18x). More processes of this run cannot decide
    such a verdict; more runs of the host can (a smaller, surer spread)."""
    if interval.run_sd <= 0 or interval.run_df is None:
        return False
    keep = _quantile(confidence, interval.run_df) * interval.run_sd
    centre, bound = math.log(interval.median), math.log(1 + threshold)
    reach = 0.0
    if interval.se is not None and interval.process_df is not None:
        within = max(0.0, interval.se**2 - interval.run_sd**2)
        reach = _quantile(confidence, interval.process_df) * math.sqrt(within)
    low, high = centre - reach, centre + reach
    # the values no number of processes decides: within `keep` of +bound or of -bound
    bands = [(bound - keep, bound + keep), (-bound - keep, -bound + keep)]
    if keep >= bound:  # the two bands meet
        bands = [(-bound - keep, bound + keep)]
    return any(lo <= low and high <= hi for lo, hi in bands)


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
    equal spread, which never overstates the shrinking of the quantile. The between-run part
    of a widened interval (run_sd) does not shrink with processes: near the threshold it leaves
    a verdict that no number of processes decides."""
    if not interval.has_interval:
        return None
    n = interval.n
    centre, half = math.log(interval.median), math.log(interval.high / interval.median)
    margin = abs(abs(centre) - math.log(1 + threshold))
    if half < margin:
        return n
    if margin == 0:
        return None

    between = interval.run_sd**2
    # A union of several pairs' intervals has no se: its projection leaves the spread out.
    within = interval.se**2 - between if between > 0 and interval.se is not None else None

    def width(processes: int) -> float:
        """The half-width's factor t_q(df) x se at `processes` a side (up to a constant)."""
        if within is None:
            return _quantile(confidence, 2 * (processes - 1)) / math.sqrt(processes)
        shrunk = within * n / processes
        df = _satterthwaite([(shrunk, 2 * (processes - 1)), (between, interval.run_df)])
        return _quantile(confidence, df) * math.sqrt(shrunk + between)

    now = width(n)
    for more in range(n + 1, most + 1):
        if half * width(more) / now < margin:
            return more
    return None
