"""The report's section "Batching experiments": automatic batch size and variable-length
batching, their table and figures."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from rnnopt.report import wide
from rnnopt.report.experiments.autobatch import (
    autobatch_figure,
    autobatch_rows,
    points_of,
    rounds_of,
)
from rnnopt.report.experiments.varlen import epochs_of, varlen_figure, varlen_rows
from rnnopt.report.figures import save_figures  # noqa: E402
from rnnopt.report.intervals import THRESHOLD
from rnnopt.report.verdicts import (
    LINEAR_R2,
    SAME_THROUGHPUT,
)
from rnnopt.report.wide import NONE


def about(threshold: float = THRESHOLD) -> str:
    """The section's reading note, at the report's speedup threshold."""
    return (
        "Automatic batch size: every batch tried (doubling, then probes guided by a linear fit "
        "of the peak against B), tokens/s from the 10th-percentile call of the timing protocol, "
        "peak heap by rnnopt.measure.heap; the pick is the faster of the largest fitting batch "
        "and the fastest other fitting one, each timed again in interleaved rounds (autobatch."
        "confirm_rounds, each after the run's spell gate; a round in a slow spell is left out "
        "and replaced; the interval of their ratio is over the kept rounds, paired by round, in "
        "one process). Variable-length batching: one dataset trained three ways from the same "
        "weights, an epoch being one step over every batch. Verdicts: the largest fitting batch "
        f"within {SAME_THROUGHPUT:.0%} of the fastest (supported when the other contender's "
        "tokens/s over the largest's has its whole interval at most "
        f"{1 + SAME_THROUGHPUT:g}x, not supported when above it, inconclusive otherwise); R^2 >= "
        f"{LINEAR_R2} for a linear memory model; with equal losses, the speedup of the padded "
        "epoch time over the way's (the ways run interleaved, epoch by epoch: the interval is "
        f"paired by epoch) by the speedups' rule: faster when its whole interval lies above "
        f"{1 + threshold:g}x, no meaningful difference inside {1 / (1 + threshold):.3f}-"
        f"{1 + threshold:g}x, inconclusive across either; "
        "losses within the dtype's tolerance (rnnopt.experiments.varlen.LOSS_RTOL)."
    )


def table(
    metrics: pd.DataFrame, series: pd.DataFrame, threshold: float = THRESHOLD
) -> pd.DataFrame:
    """experiment, guide, run, result, verdict: the batching experiments of every run (the
    epoch-time speedups judged at `threshold`)."""
    auto, varlen = wide.records(metrics, "autobatch"), wide.records(metrics, "varlen")
    rows = []
    for run in wide.runs(metrics, placeholder=True):
        found = []
        for _, row in auto[auto["run"] == run].iterrows():
            source = row["source"]
            found += autobatch_rows(row, points_of(series, source), rounds_of(series, source))
        if auto[auto["run"] == run].empty:
            found += [
                {
                    "experiment": "automatic batch size under a memory budget",
                    "guide": "4, 7; C4",
                    "result": NONE,
                    "verdict": "not measured here: no autobatch record",
                }
            ]
        for _, row in varlen[varlen["run"] == run].iterrows():
            found += varlen_rows(row, epochs_of(series, row["source"]), threshold)
        if varlen[varlen["run"] == run].empty:
            found += [
                {
                    "experiment": "variable-length batching",
                    "guide": "7",
                    "result": NONE,
                    "verdict": "not measured here: no varlen record",
                }
            ]
        rows += [{"run": run, **entry} for entry in found]
    return pd.DataFrame(rows, columns=["experiment", "guide", "run", "result", "verdict"])


FIGURES = ("autobatch", "varlen")


def draw(metrics: pd.DataFrame, series: pd.DataFrame, out_dir: str | Path) -> dict[str, str]:
    """Write out_dir/autobatch.png and varlen.png; name -> "" or why it holds no data."""
    makers = (("autobatch", autobatch_figure), ("varlen", varlen_figure))
    return save_figures(
        {name: (lambda make=make: make(metrics, series)) for name, make in makers}, out_dir
    )
