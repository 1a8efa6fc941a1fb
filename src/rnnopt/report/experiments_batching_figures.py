"""Figures of the batching experiments (rnnopt.report.experiments_batching): the autobatch
search (throughput and peak against B, budget, fit and pick) and the three ways of batching
variable-length sequences (epoch time, padding fraction, peak heap). Always written: without
the records a figure needs, its PNG says what is missing."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from rnnopt.report import wide  # noqa: E402
from rnnopt.report.figures import NoData, save_figures  # noqa: E402

WAYS = ("padded", "bucketed", "packed")
FIGURES = ("autobatch", "varlen")


def points_of(series: pd.DataFrame, source: str) -> pd.DataFrame:
    """batch, tokens_per_s, peak_mib, fits of one autobatch record, in the order tried."""
    rows = series[series["source"] == source]
    table = rows.pivot(index="step", columns="series", values="value")
    return table.reindex(columns=["batch", "tokens_per_s", "peak_mib", "fits"])


def autobatch_figure(metrics: pd.DataFrame, series: pd.DataFrame):
    """Per autobatch record: tokens/s (top) and peak MiB (bottom) against B, every point tried,
    the linear fit, the budget line and the pick."""
    auto = wide.records(metrics, "autobatch")
    auto = auto[auto["status"] == "ok"]
    if auto.empty:
        raise NoData("no ok autobatch records")
    fig, axes = plt.subplots(2, len(auto), figsize=(6.5 * len(auto), 7), squeeze=False)
    for column, (_, row) in enumerate(auto.iterrows()):
        points = points_of(series, row["source"]).sort_values("batch")
        top, bottom = axes[0, column], axes[1, column]
        fits = points["fits"] == 1
        for ax, y in ((top, "tokens_per_s"), (bottom, "peak_mib")):
            ax.plot(points["batch"], points[y], color="grey", lw=0.8, zorder=1)
            ax.scatter(points.loc[fits, "batch"], points.loc[fits, y], label="fits", zorder=2)
            ax.scatter(
                points.loc[~fits, "batch"],
                points.loc[~fits, y],
                marker="x",
                color="tab:red",
                label="over budget",
                zorder=2,
            )
            pick = points[points["batch"] == row["pick_batch"]]
            ax.scatter(
                pick["batch"],
                pick[y],
                marker="*",
                s=250,
                color="gold",
                edgecolor="black",
                label=f"pick B={int(row['pick_batch'])}",
                zorder=3,
            )
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        batches = np.linspace(1, points["batch"].max(), 100)
        if pd.notna(row.get("fit.r2")):
            bottom.plot(
                batches,
                row["fit.intercept_mib"] + row["fit.slope_mib_per_batch"] * batches,
                ls=":",
                color="black",
                label=f"fit, R^2 {row['fit.r2']:.4f}",
            )
        bottom.axhline(
            row["budget_mib"], color="tab:red", ls="--", label=f"budget {row['budget_mib']:g} MiB"
        )
        top.set_title(
            f"{row['run']}: {wide.label(row)} {row['phase']}, "
            f"T={row['seq_len']} I={row['input_size']} H={row['hidden_size']}"
        )
        top.set_ylabel("tokens/s (timing protocol)")
        bottom.set_ylabel("peak heap, MiB (rnnopt.measure.heap)")
        bottom.set_xlabel("batch size B (log scale)")
        top.legend(fontsize=7)
        bottom.legend(fontsize=7)
    fig.suptitle("Automatic batch size: every measured point, the budget and the pick")
    return fig


def varlen_figure(metrics: pd.DataFrame, series: pd.DataFrame):
    """Epoch time, padding fraction and peak heap per way of batching, per variant."""
    varlen = wide.records(metrics, "varlen")
    varlen = wide.with_labels(varlen[varlen["status"] == "ok"])
    if varlen.empty:
        raise NoData("no ok varlen records")
    if varlen["run"].nunique() > 1:
        varlen["label"] = varlen["label"] + " (" + varlen["run"] + ")"
    long = pd.DataFrame(
        [
            {
                "variant": row["label"],
                "way": way,
                "epoch ms": row[f"{way}.epoch_ms.median"],
                "padding fraction": row[f"{way}.padding_fraction"],
                "peak MiB": row[f"{way}.peak_mib"],
            }
            for _, row in varlen.iterrows()
            for way in WAYS
        ]
    )
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.8))
    for ax, y in zip(axes, ("epoch ms", "padding fraction", "peak MiB"), strict=True):
        sns.barplot(data=long, x="variant", y=y, hue="way", hue_order=WAYS, ax=ax)
        ax.set_xlabel("")
        ax.tick_params(axis="x", labelsize=8)
    first = varlen.iloc[0]
    axes[0].set_ylabel("median time per epoch, ms")
    axes[1].set_ylabel("padded / computed tokens (wasted FLOPs)")
    axes[2].set_ylabel("peak heap of one epoch, MiB (memray)")
    fig.suptitle(
        f"Variable-length batching: {first['task']}, B={first['batch']}, T<={first['seq_len']}, "
        f"H={first['hidden_size']}; packed = masked where no packed kernel exists"
    )
    return fig


def draw(metrics: pd.DataFrame, series: pd.DataFrame, out_dir: str | Path) -> dict[str, str]:
    """Write out_dir/autobatch.png and varlen.png; name -> "" or why it holds no data."""
    makers = (("autobatch", autobatch_figure), ("varlen", varlen_figure))
    return save_figures(
        {name: (lambda make=make: make(metrics, series)) for name, make in makers}, out_dir
    )
