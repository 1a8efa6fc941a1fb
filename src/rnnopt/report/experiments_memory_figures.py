"""Figures of the cache, GC and precision experiments (rnnopt.report.experiments_memory).

weights_vs_cache: GFLOP/s against W_hh bytes (log x), the host's L1d / L2 / L3 as vertical
lines; gc_churn: mean step time with the collector on and off; precision_error: the error of
h against float64 per time step over the long sequence. A figure without its records says
what is missing instead.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from rnnopt.report import wide  # noqa: E402
from rnnopt.report.experiment_rows import format_bytes  # noqa: E402
from rnnopt.report.experiments_memory import CACHE_LEVELS, cache_points, gc_pairs  # noqa: E402
from rnnopt.report.figures import NoData, save_figures  # noqa: E402

FIGURES = ("weights_vs_cache", "gc_churn", "precision_error")


def _first_run(frame: pd.DataFrame, what: str) -> tuple[str, pd.DataFrame]:
    if frame.empty:
        raise NoData(f"no {what}")
    run = sorted(frame["run"].unique())[0]
    return run, frame[frame["run"] == run]


def weights_vs_cache(metrics: pd.DataFrame, series: pd.DataFrame):
    run, points = _first_run(cache_points(metrics), "hidden-size sweep (profile records)")
    points = wide.with_labels(points)
    points["curve"] = points["label"] + " " + points["phase"]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    sns.lineplot(points, x="w_hh_bytes", y="gflops", hue="curve", marker="o", ax=ax)
    ax.set_xscale("log", base=2)
    first = points.iloc[0]
    for key, name in CACHE_LEVELS:
        size = first.get(f"{key}_bytes")
        if size is not None and not pd.isna(size):
            ax.axvline(float(size), color="grey", linestyle="--", linewidth=1)
            ax.text(
                float(size),
                ax.get_ylim()[1],
                f" {name} {format_bytes(float(size))}",
                rotation=90,
                va="top",
                ha="right",
                fontsize=8,
                color="grey",
            )
    ax.set_xlabel("W_hh bytes (4H x H x itemsize), log scale")
    ax.set_ylabel("achieved GFLOP/s")
    ax.set_title(
        f"Weights against the cache (C13), {run}: B={first['batch']} T={first['seq_len']} "
        f"I={first['input_size']}, {int(first['threads'])} thread(s)"
    )
    ax.legend(fontsize=8)
    return fig


def gc_churn(metrics: pd.DataFrame, series: pd.DataFrame):
    run, pairs = _first_run(gc_pairs(metrics), "churn records (collector on and off)")
    rows = []
    for _, row in pairs.iterrows():
        name = f"{row['variant']} {wide.DTYPE_SHORT[row['dtype']]}"
        for mode in ("on", "off"):
            rows.append({"variant": name, "collector": mode, "ms": row[f"time_ms.mean_{mode}"]})
    fig, ax = plt.subplots(figsize=(8, 4.5))
    sns.barplot(pd.DataFrame(rows), x="variant", y="ms", hue="collector", ax=ax)
    for index, (_, row) in enumerate(pairs.iterrows()):
        text = (
            f"GC {row['gc.share_on']:.0%}\n{row['objects.cyclic_garbage_per_call_on']:.0f} cyc/call"
        )
        ax.text(index, ax.get_ylim()[1] * 0.95, text, ha="center", va="top", fontsize=8)
    first = pairs.iloc[0]
    ax.set_ylabel("mean time per call, ms")
    ax.set_xlabel("")
    ax.set_title(
        f"Cyclic garbage collector on vs off (C12), {run}: {first['phase']}, "
        f"{wide.shape_text(first)}"
    )
    return fig


def precision_error(metrics: pd.DataFrame, series: pd.DataFrame):
    records = wide.records(metrics, "precision")
    records = records[(records["status"] == "ok") & (records["dtype"] != "float64")]
    run, records = _first_run(records, "precision records below float64")
    curves = series[
        (series["series"] == "error_per_step") & series["source"].isin(records["source"])
    ]
    if curves.empty:
        raise NoData("no error_per_step series in the precision records")
    curves = curves.merge(wide.with_labels(records)[["source", "label"]], on="source")
    curves = curves[curves["value"] > 0]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    sns.lineplot(curves, x="step", y="value", hue="label", ax=ax, linewidth=1)
    ax.set_yscale("log")
    ax.set_xlabel("time step t")
    ax.set_ylabel("max |h_t - h_t(float64)| over batch and units")
    ax.set_title(
        f"Error against float64 along the sequence, {run}: {wide.shape_text(records.iloc[0])}"
    )
    return fig


def draw(metrics: pd.DataFrame, series: pd.DataFrame, out_dir: str | Path) -> dict[str, str]:
    """Write out_dir/<figure>.png for FIGURES; name -> "" or why it holds no data."""
    makers = zip(FIGURES, (weights_vs_cache, gc_churn, precision_error), strict=True)
    return save_figures(
        {name: (lambda make=make: make(metrics, series)) for name, make in makers}, out_dir
    )
