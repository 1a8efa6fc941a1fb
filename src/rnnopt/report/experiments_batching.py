"""Report of the batching experiments: automatic batch size (autobatch records) and
variable-length batching (varlen records). One table of rows with verdicts, two figures.

Rows, per run (host), each judged by the thresholds below:
- autobatch pick: "the largest batch that fits is the one to take" (guide 4, C4) is supported
  when the largest fitting batch's tokens/s is within SAME_THROUGHPUT of the best fitting
  batch's; not measured when the budget never binds up to max_batch or nothing fits.
- memory linear in B: supported when the least-squares fit peak ~ a + b*B has R^2 >=
  LINEAR_R2 over the points tried.
- length-sorted buckets and packed sequences vs padding to each batch's longest: supported
  when the epoch-time speedup interval lies above 1x and the losses agree; the interval, as in
  the comparison table: (padded median -+ IQR/2) / (candidate median +- IQR/2). A variant
  without a packed kernel (masking) gets no verdict on speed: it computes every padded step.
  Neither does a record with fewer than MIN_TIMED_EPOCHS timed epochs.
- padding made exact by masking: supported when the three ways' epoch losses agree within
  rnnopt.experiments.varlen.LOSS_RTOL of the dtype.
A run without these records gets rows saying "not measured here". Figures:
rnnopt.report.experiments_batching_figures.
"""

from __future__ import annotations

import pandas as pd

from rnnopt.report import wide
from rnnopt.report.experiments_batching_figures import FIGURES, draw, points_of
from rnnopt.report.verdicts import LINEAR_R2, MIN_TIMED_EPOCHS, SAME_THROUGHPUT
from rnnopt.report.wide import NONE

__all__ = ["ABOUT", "FIGURES", "draw", "table"]

ABOUT = (
    "Automatic batch size: every batch tried (doubling, then probes guided by a linear fit of "
    "the peak against B), tokens/s by the timing protocol, peak heap by rnnopt.measure.heap; "
    "the pick is the fastest batch within the budget. Variable-length batching: one dataset "
    "trained three ways from the same weights, an epoch being one step over every batch. Verdicts: "
    f"the largest fitting batch within {SAME_THROUGHPUT:.0%} of the fastest; R^2 >= "
    f"{LINEAR_R2} for a linear memory model; epoch-time interval above 1x with equal losses; "
    "losses within the dtype's tolerance (rnnopt.experiments.varlen.LOSS_RTOL)."
)


def _value(row, name: str):
    value = row.get(name)
    return None if value is None or pd.isna(value) else value


def _autobatch_rows(row, points: pd.DataFrame) -> list[dict]:
    what = f"{wide.label(row)} {row['phase']}, T={row['seq_len']} I={row['input_size']}: "
    pick_row = {"experiment": "automatic batch size under a memory budget", "guide": "4, 7; C4"}
    linear_row = {"experiment": "peak memory linear in the batch size", "guide": "4; C3"}
    if row["status"] != "ok":
        why = f"not measured here: {row['status']}: {row['reason']}"
        return [entry | {"result": NONE, "verdict": why} for entry in (pick_row, linear_row)]
    budget = row["budget_mib"]
    pick_batch = int(row["pick_batch"])
    largest = int(row["max_fitting_batch"])
    fitting = points[points["fits"] == 1]
    largest_tps = fitting.loc[fitting["batch"] == largest, "tokens_per_s"].max()
    ratio = _value(row, "pick_over_batch1_tokens_per_s")
    result = (
        f"{what}budget {budget:g} MiB: pick B={pick_batch}, {row['pick_tokens_per_s']:.3g} "
        f"tokens/s"
        + (f" ({ratio:.1f}x B=1)" if ratio else "")
        + f", peak {row['pick_peak_mib']:.2f} MiB; largest fitting B={largest}; "
        f"{int(row['points_tried'])} points"
    )
    if not row["budget_binding"]:
        verdict = f"not measured here: the budget never binds up to max_batch={largest}"
    elif largest_tps >= (1 - SAME_THROUGHPUT) * row["pick_tokens_per_s"]:
        verdict = f"supported: the largest fitting batch B={largest} is (within 5%) the fastest"
    else:
        verdict = (
            f"not supported: B={pick_batch} gives {row['pick_tokens_per_s'] / largest_tps:.2f}x "
            f"the tokens/s of the largest fitting B={largest}"
        )
    r2 = _value(row, "fit.r2")
    if r2 is None:
        fit_result, fit_verdict = NONE, "not measured here: fewer than two batch sizes ran"
    else:
        fit_result = (
            f"peak = {row['fit.intercept_mib']:.3f} + {row['fit.slope_mib_per_batch']:.4f} * B "
            f"MiB, R^2 {r2:.4f} over {int(row['fit.n'])} points; the model's largest fitting "
            f"B={int(row['fit.predicted_max_batch'])}, measured {largest}"
        )
        fit_verdict = (
            "supported" if r2 >= LINEAR_R2 else f"not supported: R^2 {r2:.3f} < {LINEAR_R2}"
        )
    return [
        pick_row | {"result": result, "verdict": verdict},
        linear_row | {"result": fit_result, "verdict": fit_verdict},
    ]


def _epoch_speedup(row, candidate: str) -> tuple[float, float, float]:
    """(median, low, high) of padded / candidate epoch time, from medians +- IQR/2."""
    base, cand = row["padded.epoch_ms.median"], row[f"{candidate}.epoch_ms.median"]
    base_half, cand_half = row["padded.epoch_ms.iqr"] / 2, row[f"{candidate}.epoch_ms.iqr"] / 2
    low = (base - base_half) / (cand + cand_half)
    high = (base + base_half) / (cand - cand_half) if cand > cand_half else float("inf")
    return base / cand, low, high


def _varlen_rows(row) -> list[dict]:
    label = wide.label(row)
    experiments = {
        "bucketed": "length-sorted buckets vs padding each batch",
        "packed": "packed sequences vs padding each batch",
    }
    exact = {"experiment": "masking makes padding exact (equal losses)", "guide": "7"}
    if row["status"] != "ok":
        why = f"not measured here: {row['status']}: {row['reason']}"
        return [
            {"experiment": e, "guide": "7", "result": f"{label}: -", "verdict": why}
            for e in (*experiments.values(), exact["experiment"])
        ]
    agree = bool(row["losses_agree"])
    rows = []
    for way, experiment in experiments.items():
        median, low, high = _epoch_speedup(row, way)
        kernel = way != "packed" or bool(row["packed.packed_kernel"])
        name = way if kernel else "masked (no packed kernel)"
        result = (
            f"{label}: {name}: padding {row['padded.padding_fraction']:.0%} -> "
            f"{row[f'{way}.padding_fraction']:.0%}, epoch {row['padded.epoch_ms.median']:.1f} -> "
            f"{row[f'{way}.epoch_ms.median']:.1f} ms ({median:.2f}x, {low:.2f}-{high:.2f}), "
            f"peak {row['padded.peak_mib']:.2f} -> {row[f'{way}.peak_mib']:.2f} MiB"
        )
        if not kernel:
            verdict = "not measured here: no packed kernel; masking computes every padded step"
        elif not agree:
            verdict = "not supported: the losses differ (see the exactness row)"
        elif min(row["padded.epoch_ms.n"], row[f"{way}.epoch_ms.n"]) < MIN_TIMED_EPOCHS:
            verdict = f"not measured here: fewer than {MIN_TIMED_EPOCHS} timed epochs"
        elif low > 1:
            verdict = f"supported: {median:.2f}x faster per epoch"
        elif high < 1:
            verdict = f"not supported: slower ({median:.2f}x)"
        else:
            verdict = f"not supported: no clear speedup ({low:.2f}-{high:.2f}x)"
        rows.append({"experiment": experiment, "guide": "7", "result": result, "verdict": verdict})
    worst, rtol = row["loss_max_rel_diff"], row["loss_rtol"]
    result = f"{label}: epoch losses of the 3 ways differ by at most {worst:.1e} (relative)"
    verdict = "supported" if agree else f"not supported: {worst:.1e} > tolerance {rtol:g}"
    return [*rows, exact | {"result": result, "verdict": f"{verdict} (tolerance {rtol:g})"}]


def table(metrics: pd.DataFrame, series: pd.DataFrame) -> pd.DataFrame:
    """experiment, guide, run, result, verdict: the batching experiments of every run."""
    auto, varlen = wide.records(metrics, "autobatch"), wide.records(metrics, "varlen")
    rows = []
    for run in wide.runs(metrics, placeholder=True):
        found = []
        for _, row in auto[auto["run"] == run].iterrows():
            found += _autobatch_rows(row, points_of(series, row["source"]))
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
            found += _varlen_rows(row)
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
