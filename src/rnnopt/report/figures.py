"""The report's figures (seaborn, Agg backend), each readable alone: title, units, legend.

Every figure in FIGURES is always written: where the records it needs are missing, the PNG
says what is missing instead, so the report (and snakemake --report) never lacks a file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from rnnopt.report import wide  # noqa: E402
from rnnopt.report.aggregate import SHAPE_KEYS  # noqa: E402
from rnnopt.report.comparisons import Side  # noqa: E402
from rnnopt.report.outcomes import pair_intervals  # noqa: E402
from rnnopt.report.roofline import (  # noqa: E402
    LEVEL_NAMES,
    bandwidth_roofs,
    gemm_ceilings,
    peak_row_of,
    roofline_points,
)
from rnnopt.report.verdicts import LEARNED_RATIO  # noqa: E402

BASELINE = Side("numpy-*-naive", "float64")
DPI = 110


class NoData(Exception):
    """The records a figure needs are not there; the message says which."""


@dataclass
class Frames:
    profile: pd.DataFrame
    memory: pd.DataFrame
    train: pd.DataFrame
    peak: pd.DataFrame
    series: pd.DataFrame

    @classmethod
    def of(cls, metrics: pd.DataFrame, series: pd.DataFrame) -> Frames:
        failed = wide.failed_verification(metrics)

        def ok(kind):
            frame = wide.records(metrics, kind)
            frame = wide.with_labels(frame[frame["status"] == "ok"])
            keys = zip(frame["run"], frame["variant"], frame["dtype"], frame["device"], strict=True)
            unverified = [key in failed for key in keys]
            if any(unverified):
                frame.loc[unverified, "label"] += " (FAILED verify)"
            return frame

        return cls(ok("profile"), ok("memory"), ok("train"), ok("peak"), series)


def _anchor(frame: pd.DataFrame) -> pd.DataFrame:
    return wide.preferred(frame)


def _conditions(frame: pd.DataFrame, fixed: list[str]) -> str:
    """'T=20, I=32, H=64, step, 1 thread': the values held fixed in a figure."""
    names = {"batch": "B", "seq_len": "T", "input_size": "I", "hidden_size": "H"}
    parts = [f"{names[k]}={frame[k].iloc[0]}" for k in fixed if k in names]
    if "phase" in frame:
        parts.append(str(frame["phase"].iloc[0]))
    if "threads" in frame and frame["threads"].notna().any():
        n = int(frame["threads"].iloc[0])
        parts.append(f"{n} thread{'s' if n > 1 else ''}")
    return ", ".join(parts)


def _most_common(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Rows at the most frequent combination of `keys` (the grid's main sweep or anchor)."""
    keys = list(keys)
    counts = frame.groupby(keys, dropna=False).size()
    best = counts.idxmax()
    best = best if isinstance(best, tuple) else (best,)
    return frame[(frame[keys] == pd.Series(dict(zip(keys, best, strict=True)))).all(axis=1)]


def _plain_log(axis, suffix: str = "") -> None:
    """Tick labels of a log axis as plain numbers (3x, 0.5x; 200, 4000), not 3 x 10^0."""
    formatter = matplotlib.ticker.FuncFormatter(lambda value, _: f"{value:g}{suffix}")
    axis.set_major_formatter(formatter)
    axis.set_minor_formatter(formatter)


def speedup(f: Frames):
    profile = _anchor(f.profile)
    base = profile[BASELINE.mask(profile)]
    if base.empty:
        raise NoData("no ok profile records of numpy-*-naive float64 (the baseline)")
    keys = ["run", "cell", "phase", *SHAPE_KEYS, "threads"]
    data = profile.merge(
        base[[*keys, "time_ms.median", "process_times"]], on=keys, suffixes=("_c", "_b")
    )
    data = _most_common(data, SHAPE_KEYS)
    data = pd.concat([data, pair_intervals(data)], axis=1)
    cells = sorted(data["cell"].unique())
    runs = sorted(data["run"].unique())
    palette = sns.color_palette("deep", len(runs))
    fig, axes = plt.subplots(1, len(cells), figsize=(2 + 7 * len(cells), 6), squeeze=False)
    width = 0.8 / len(runs)
    for ax, cell in zip(axes[0], cells, strict=True):
        d = data[data["cell"] == cell]
        labels = list(d.groupby("label")["ratio"].mean().sort_values().index)
        for i, run in enumerate(runs):
            dr = d[d["run"] == run].groupby("label")[["ratio", "low", "high"]].first()
            dr = dr.reindex(labels)
            x = np.arange(len(labels)) + (i - (len(runs) - 1) / 2) * width
            errors = np.clip([dr["ratio"] - dr["low"], dr["high"] - dr["ratio"]], 0, None)
            ax.bar(x, dr["ratio"], width, yerr=errors, capsize=3, color=palette[i], label=run)
            for xi, value in zip(x, dr["ratio"], strict=True):
                if np.isfinite(value):
                    ax.annotate(
                        f"{value:.1f}x",
                        (xi, value),
                        ha="center",
                        va="bottom",
                        fontsize=7,
                        xytext=(0, 2),
                        textcoords="offset points",
                    )
        ax.set_yscale("log")
        _plain_log(ax.yaxis, "x")
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
        ax.set_xticks(np.arange(len(labels)), labels, rotation=40, ha="right", fontsize=8)
        ax.set_ylabel("speedup over the naive baseline (x, log scale)")
        ax.set_title(f"{cell.upper()}: vs numpy-{cell}-naive f64")
        ax.legend(title="run", fontsize=8)
    fig.suptitle(
        "Speedup vs the naive NumPy baseline, error bars: 95% intervals over processes\n"
        + _conditions(data, list(SHAPE_KEYS)),
        fontsize=12,
    )
    return fig


def _sweep(frame: pd.DataFrame, x: str, y: str, what: str) -> tuple[pd.DataFrame, list[str]]:
    """Rows of the sweep over `x` with the most points, other sizes fixed; hue = label."""
    frame = _anchor(frame.dropna(subset=[y]))
    others = [k for k in SHAPE_KEYS if k != x]
    if frame.empty:
        raise NoData(f"no ok {what} records")
    swept = frame.groupby(["run", "label", *others])[x].transform("nunique")
    frame = frame[swept >= 2]
    if frame.empty:
        raise NoData(f"no {what} records sweeping {x} with the other sizes fixed")
    return _most_common(frame, others), others


def _lines(data, x, y, title, xlabel, ylabel, fixed):
    fig, ax = plt.subplots(figsize=(8, 5.5))
    sns.lineplot(data=data, x=x, y=y, hue="label", style="run", markers=True, dashes=False, ax=ax)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(data[x].unique()))
    ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_yscale("log")
    _plain_log(ax.yaxis)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(f"{title}\n{_conditions(data, fixed)}")
    ax.legend(fontsize=7, loc="best")
    return fig


def throughput_vs_batch(f: Frames):
    data, fixed = _sweep(f.profile, "batch", "tokens_per_s", "profile")
    return _lines(
        data,
        "batch",
        "tokens_per_s",
        "Throughput vs batch size",
        "batch size B (log scale)",
        "tokens/s (log scale)",
        fixed,
    )


def time_vs_seq_len(f: Frames):
    data, fixed = _sweep(f.profile, "seq_len", "time_ms.median", "profile")
    return _lines(
        data,
        "seq_len",
        "time_ms.median",
        "Time per call vs sequence length",
        "sequence length T (log scale)",
        "median time per call, ms (log scale)",
        fixed,
    )


def memory_vs_batch(f: Frames):
    data, fixed = _sweep(f.memory, "batch", "peak_mib", "memory")
    data = data[data["peak_mib"] > 0]
    if data.empty:
        raise NoData("every measured peak is 0 MiB")
    return _lines(
        data,
        "batch",
        "peak_mib",
        "Peak memory of one call vs batch size",
        "batch size B (log scale)",
        "peak memory above baseline, MiB (log scale)",
        fixed,
    )


def loss_curves(f: Frames):
    """Training loss per step (left) and held-out loss at the evaluation points (right) of the
    base runs on the task most variants trained, with the held-out predict-the-mean baseline
    and the `learned` threshold of the verdicts."""
    train = f.train[f.train["setting"] == "base"]
    if train.empty:
        raise NoData("no ok training records (setting base)")
    task = train.groupby("task")["label"].nunique().idxmax()
    train = train[train["task"] == task]
    series = f.series[f.series["source"].isin(train["source"])]
    curves = series[series["series"] == "loss"].merge(train[["source", "label"]], on="source")
    if curves.empty:
        raise NoData(f"no loss series in the training records of task {task}")
    heldout = _heldout_curves(series).merge(train[["source", "label", "run"]], on="source")
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.5), sharey=True)
    style = "run" if train["run"].nunique() > 1 else None
    sns.lineplot(data=curves, x="step", y="value", hue="label", style=style, ax=left, lw=0.8)
    if not heldout.empty:
        sns.lineplot(
            data=heldout, x="step", y="value", hue="label", style=style, ax=right, marker="o"
        )
    baseline = train["heldout_baseline_loss"].dropna()
    for ax in (left, right):
        if len(baseline):
            ax.axhline(baseline.median(), color="black", ls=":", label="predict-the-mean")
            ax.axhline(
                LEARNED_RATIO * baseline.median(),
                color="grey",
                ls="--",
                label=f"learned: {LEARNED_RATIO:.0%} of predict-the-mean",
            )
        if (curves["value"] > 0).all() and (heldout.empty or (heldout["value"] > 0).all()):
            ax.set_yscale("log")
        ax.set_xlabel("optimiser step")
    left.set_ylabel("loss (log scale)")
    left.set_title("training loss of each step's batch")
    right.set_title("held-out loss (split never trained on)")
    left.get_legend().remove()
    right.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.suptitle(
        f"Every variant trained on task {task!r}: same batches, one set of initial weights per cell"
    )
    return fig


def _heldout_curves(series: pd.DataFrame) -> pd.DataFrame:
    """source, step (optimiser steps done), value (held-out loss) from the paired series."""
    keys = ["source", "step"]
    at = series[series["series"] == "eval_step"][[*keys, "value"]].rename(columns={"value": "at"})
    loss = series[series["series"] == "heldout_loss"][[*keys, "value"]]
    paired = loss.merge(at, on=keys)
    return paired.drop(columns="step").rename(columns={"at": "step"})


def memory_timeline(f: Frames):
    memory = _anchor(f.memory)
    pick = memory[Side("numpy-*-naive").mask(memory) | Side("numpy-*-inplace").mask(memory)]
    if pick.empty:
        raise NoData("no ok memory records of numpy-*-naive or numpy-*-inplace")
    pick = _most_common(pick, ["cell", "dtype", *SHAPE_KEYS])
    series = f.series[f.series["source"].isin(pick["source"])]
    series = series[series["series"].isin(["rss_t_s", "rss_mib"])]
    if series.empty:
        raise NoData("the memory records hold no rss_t_s / rss_mib series")
    points = series.pivot_table(index=["source", "step"], columns="series", values="value")
    points = points.reset_index().merge(pick[["source", "label", "run"]], on="source")
    points["rss_above_start_mib"] = points["rss_mib"] - points.groupby("source")[
        "rss_mib"
    ].transform("first")
    fig, ax = plt.subplots(figsize=(9, 5.5))
    sns.lineplot(
        data=points,
        x="rss_t_s",
        y="rss_above_start_mib",
        hue="label",
        style="run",
        ax=ax,
        estimator=None,
        units="source",
        drawstyle="steps-post",
    )
    ax.set_xlabel("time since the first call, s")
    ax.set_ylabel("resident memory above the start, MiB")
    ax.set_title("Memory timeline: naive vs in-place NumPy\n" + _conditions(pick, list(SHAPE_KEYS)))
    return fig


# Shapes with at least this many variants profiled get a roofline panel: the anchor shapes,
# not the sweeps' points (two variants, or one).
ROOFLINE_MIN_VARIANTS = 3


def roofline(f: Frames):
    """Arithmetic intensity (analytic FLOPs / analytic bytes) against achieved GFLOP/s, one
    panel per run, device and anchor shape, at the run's fewest threads: the GEMM ceiling per
    dtype (flat) and the bandwidth roof per memory level (slanted), measured in that run."""
    points = roofline_points(f.profile, f.peak) if len(f.profile) else f.profile
    if points.empty:
        raise NoData("no ok profile records with gflops")
    points = points[points["threads"] == points.groupby("run")["threads"].transform("min")]
    points = points.assign(shape=[wide.shape_text(r) for _, r in points.iterrows()])
    variants = points.groupby(["run", "device", "shape"])["variant"].transform("nunique")
    points = points[variants >= ROOFLINE_MIN_VARIANTS]
    if points.empty:
        raise NoData(f"no shape with {ROOFLINE_MIN_VARIANTS} or more variants profiled")
    panels = sorted(points.groupby(["run", "device", "shape"]).groups)
    fig, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 6), squeeze=False)
    for ax, (run, device, shape) in zip(axes[0], panels, strict=True):
        d = points[
            (points["run"] == run) & (points["device"] == device) & (points["shape"] == shape)
        ]
        sns.scatterplot(data=d, x="intensity", y="gflops", hue="label", style="phase", ax=ax, s=45)
        threads = d["threads"].iloc[0]
        _draw_roofs(ax, peak_row_of(f.peak, run, threads), device, d)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity, FLOP per byte of modelled traffic (log)")
        ax.set_ylabel("achieved GFLOP/s (log)")
        where = "GPU" if device == "cuda" else f"{threads} thread{'s' if threads > 1 else ''}"
        ax.set_title(f"{run}: {shape}, {where}", fontsize=10)
        ax.legend(fontsize=6, ncol=2, loc="lower right")
    fig.suptitle(
        "Roofline: GEMM ceiling per dtype (flat, best library) and bandwidth per memory level "
        "(slanted, best kernel), measured on this host"
    )
    return fig


def _draw_roofs(ax, peak_row, device: str, points: pd.DataFrame) -> None:
    if peak_row is None:
        ax.text(0.02, 0.98, "no peak record: roofs not drawn", transform=ax.transAxes, va="top")
        return
    ceilings = {dtype: value for dtype, (value, _) in gemm_ceilings(peak_row, device).items()}
    dtypes = [dtype for dtype in ceilings if dtype in set(points["dtype"])] or list(ceilings)
    low = min(points["intensity"].min(), 0.1) / 2
    high = max(points["intensity"].max(), 100) * 2
    top = max((ceilings[dtype] for dtype in dtypes), default=points["gflops"].max())
    for dtype in dtypes:
        ax.plot([low, high], [ceilings[dtype]] * 2, "--", color="grey", linewidth=1)
        ax.annotate(f"{dtype} GEMM ceiling", (high, ceilings[dtype]), ha="right", va="bottom",
                    fontsize=7, color="grey")  # fmt: skip
    for level, gbs in bandwidth_roofs(peak_row, device).items():
        knee = top / gbs  # where this roof meets the highest ceiling
        ax.plot([low, knee], [gbs * low, top], ":", linewidth=1, color="tab:blue")
        ax.annotate(f"{LEVEL_NAMES.get(level, level)} {gbs:.0f} GB/s", (low, gbs * low),
                    fontsize=7, color="tab:blue", rotation=30, va="bottom")  # fmt: skip
    ax.set_xlim(low, high)


FIGURES = {
    "speedup": speedup,
    "throughput_vs_batch": throughput_vs_batch,
    "time_vs_seq_len": time_vs_seq_len,
    "memory_vs_batch": memory_vs_batch,
    "loss_curves": loss_curves,
    "memory_timeline": memory_timeline,
    "roofline": roofline,
}


def _placeholder(name: str, why: str):
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.axis("off")
    ax.set_title(name.replace("_", " "))
    ax.text(0.5, 0.5, f"Not drawn: {why}", ha="center", va="center", wrap=True)
    return fig


def save_figures(makers: dict, out_dir: str | Path) -> dict[str, str]:
    """Draw each `name -> make()` into out_dir/<name>.png, a placeholder saying why where
    `make` raises NoData; returns name -> "" or why it is empty."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    missing = {}
    for name, make in makers.items():
        try:
            fig, missing[name] = make(), ""
        except NoData as why:
            fig, missing[name] = _placeholder(name, str(why)), str(why)
        fig.tight_layout()
        fig.savefig(out_dir / f"{name}.png", dpi=DPI)
        plt.close(fig)
    return missing


def draw_all(metrics: pd.DataFrame, series: pd.DataFrame, out_dir: str | Path) -> dict[str, str]:
    """Write every figure to out_dir/<name>.png; returns name -> "" or why it is empty."""
    frames = Frames.of(metrics, series)
    sns.set_theme(style="whitegrid", context="notebook")
    return save_figures(
        {name: (lambda draw=draw: draw(frames)) for name, draw in FIGURES.items()}, out_dir
    )
