"""The speed verdicts a run's processes could not decide, and the profile jobs that decide them.

A verdict is undecided when its speed interval crosses the practical-significance threshold
(rnnopt.report.intervals.classify gives "inconclusive") and no other criterion already fails
it. More processes of both sides narrow that interval: `rnnopt topup` times them, step by step,
until the verdict is decided or its budget is spent (docs/intervals.md, "Undecided verdicts").
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from rnnopt.report import table
from rnnopt.report.comparisons import COMPARISONS
from rnnopt.report.intervals import CONFIDENCE, THRESHOLD, Interval
from rnnopt.report.verdicts import INCONCLUSIVE, per_shape, single_verdict, speed, verdict_category


@dataclass(frozen=True)
class Undecided:
    """One comparison at one shape whose verdict rests on a speed interval (in `undecided`:
    one that the interval leaves inconclusive)."""

    optimisation: str
    run: str
    shape: str  # table.ALL_SHAPES for a row measured at one shape
    speedup: Interval
    jobs: tuple[tuple, ...]  # rnnopt.report.outcomes.JOB_KEYS of both sides

    @property
    def key(self) -> tuple[str, str, str]:
        return self.optimisation, self.run, self.shape

    def __str__(self) -> str:
        where = "" if self.shape == table.ALL_SHAPES else f" at {self.shape}"
        return f"{self.optimisation}{where}: {self.speedup}"


def speed_verdicts(
    metrics: pd.DataFrame,
    threshold: float = THRESHOLD,
    confidence: float = CONFIDENCE,
    spread: dict | None = None,
) -> list[tuple[Undecided, bool]]:
    """Every comparison (and shape) of every run in `metrics` whose verdict rests on a speed
    interval over processes, each with whether it is undecided: inconclusive because that
    interval crosses the threshold (and no other criterion already fails it)."""
    timed = [c for c in COMPARISONS if c.method == "pair" and "speed" in c.criteria]
    found = []
    for comparison, run, outcome in table.outcomes(metrics, timed, confidence, spread):
        if outcome.unverified:
            continue
        shapes = outcome.by_shape or {table.ALL_SHAPES: outcome}
        for shape, shaped in shapes.items():
            one = per_shape(outcome, shaped) if outcome.by_shape else outcome
            if one.speedup is None:
                continue
            verdict = single_verdict(comparison, one, threshold)
            open_ = (
                verdict_category(verdict) == "inconclusive"
                and speed(one, threshold)[0] == INCONCLUSIVE
            )
            row = Undecided(comparison.optimisation, run, shape, one.speedup, one.jobs)
            found.append((row, open_))
    return found


def undecided(
    metrics: pd.DataFrame,
    threshold: float = THRESHOLD,
    confidence: float = CONFIDENCE,
    spread: dict | None = None,
) -> list[Undecided]:
    """Every comparison (and shape) of every run in `metrics` that is inconclusive because its
    speed interval crosses the threshold."""
    return [row for row, open_ in speed_verdicts(metrics, threshold, confidence, spread) if open_]
