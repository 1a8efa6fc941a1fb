"""The report's section "Cache, GC and precision experiments": their table, the points
behind it and their figures."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from rnnopt.report import wide
from rnnopt.report.experiments.cache import cache_points, cache_rows, weights_vs_cache
from rnnopt.report.experiments.churn import gc_churn, gc_pairs, gc_rows
from rnnopt.report.experiments.precision import precision_error, precision_points, precision_rows
from rnnopt.report.experiments.rows import COLUMNS, runs
from rnnopt.report.figures import save_figures  # noqa: E402
from rnnopt.report.verdicts import (
    CACHE_DROP,
    GC_SHARE_MATTERS,
    OUTPUT_ERROR_MATTERS,
    SAME_LOSS,
)

ABOUT = (
    "Weights against the cache (C13): a hidden-size sweep at fixed B, T and I; GFLOP/s from "
    "the analytic FLOP count; W_hh bytes = 4H*H*itemsize, weight bytes per step = "
    "(4H*(I+H) + 8H)*itemsize (every weight and bias read once per step); cache sizes of one "
    "core from the host (sysfs). The ratio of the best GFLOP/s beyond L3 to the best inside "
    "carries a 95% interval over the two points' processes (each process's 10th-percentile "
    "call, as the speedups), widened by the host's between-run spread of that ratio where the "
    "spread file measures it; where this run agrees with the host's reference runs, the "
    "verdict reads their pooled ratio (as the speedups' verdicts). Verdict: supported when the "
    "whole interval lies below "
    f"{CACHE_DROP:.0%}, not supported when it lies at or above it, inconclusive when it "
    "crosses it. GC and churn (C2, C12): each variant timed in "
    "fresh processes with the cyclic collector on and off (off: disabled during the timed "
    "calls, collected between them, untimed); cyclic garbage: objects gc.collect() finds "
    "unreachable after a call (what reference counting cannot free). Verdict: C12 holds when "
    f"the collector's pauses take over {GC_SHARE_MATTERS:.0%} of the timed time of the run "
    "with it on (one process: the on / off means of two processes are shown, not judged). "
    "Precision (C6, C11): error against "
    "the float64 reference over one long sequence and the held-out loss after the same "
    f"training; the loss of precision matters above {OUTPUT_ERROR_MATTERS:g} absolute error "
    "in h or a held-out loss off that of the most precise dtype trained (float64, else "
    f"float32) by more than {SAME_LOSS:.0%}."
)


def table(metrics: pd.DataFrame, spread: dict | None = None) -> pd.DataFrame:
    """experiment, claim, run, result, verdict: the three experiments of every run; `spread`
    (run -> rerun_spread.read's pairs) judges the cache sweeps over the reference runs."""
    rows = []
    for run in runs(metrics):
        found = cache_rows(metrics, run, (spread or {}).get(run))
        found += gc_rows(metrics, run) + precision_rows(metrics, run)
        rows += [{"run": run, **row} for row in found]
    return pd.DataFrame(rows, columns=COLUMNS)


def point_tables(metrics: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The numbers behind the rows: weights_vs_cache, gc_churn, precision (CSV tables)."""
    cache = cache_points(metrics)
    cache_columns = ["run", "variant", "dtype", "phase", "threads", *wide.SHAPE_KEYS]
    cache_columns += ["w_hh_bytes", "w_hh_bytes_per_thread", "weight_bytes_per_step", "level"]
    cache_columns += ["time_ms.median", "gflops"]
    precision = precision_points(metrics)
    return {
        "weights_vs_cache": cache[cache_columns] if not cache.empty else pd.DataFrame(),
        "gc_churn": gc_pairs(metrics),
        "precision": precision,
    }


FIGURES = ("weights_vs_cache", "gc_churn", "precision_error")


def draw(metrics: pd.DataFrame, series: pd.DataFrame, out_dir: str | Path) -> dict[str, str]:
    """Write out_dir/<figure>.png for FIGURES; name -> "" or why it holds no data."""
    makers = zip(FIGURES, (weights_vs_cache, gc_churn, precision_error), strict=True)
    return save_figures(
        {name: (lambda make=make: make(metrics, series)) for name, make in makers}, out_dir
    )
