"""Report of the batching experiments: automatic batch size (autobatch records) and
variable-length batching (varlen records). One table of rows with verdicts, two figures.

Rows, per run (host), each judged by the thresholds below:
- autobatch pick: "the largest batch that fits is the one to take" (guide 4, C4) is supported
  when the largest fitting batch's tokens/s is within SAME_THROUGHPUT of the best fitting
  batch's; not measured when the budget never binds up to max_batch or nothing fits.
- memory linear in B: supported when the least-squares fit peak ~ a + b*B has R^2 >=
  LINEAR_R2 over the points tried.
- length-sorted buckets and packed sequences vs padding to each batch's longest: supported
  when the epoch-time interval is above 1x (padded median + IQR/2 lower end over candidate
  median + IQR/2 ... as the comparison table) and the losses agree; a variant without a packed
  kernel (masking) gets no verdict on speed: it computes every padded step.
- padding made exact by masking: supported when the three ways' epoch losses agree within
  rnnopt.varlen.LOSS_RTOL of the dtype.
A run without these records gets rows saying "not measured here".
"""

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

LINEAR_R2 = 0.98  # peak vs B this close to a line: the linear memory model holds
SAME_THROUGHPUT = 0.05  # the largest fitting batch within 5% of the best fitting one's tokens/s
WAYS = ("padded", "bucketed", "packed")
FIGURES = ("autobatch", "varlen")
ABOUT = (
    "Automatic batch size: every batch tried (doubling, then probes guided by a linear fit of "
    "the peak against B), tokens/s by the timing protocol, peak heap by rnnopt.heap; the pick "
    "is the fastest batch within the budget. Variable-length batching: one dataset trained "
    "three ways from the same weights, an epoch being one step over every batch. Verdicts: "
    f"the largest fitting batch within {SAME_THROUGHPUT:.0%} of the fastest; R^2 >= "
    f"{LINEAR_R2} for a linear memory model; epoch-time interval above 1x with equal losses; "
    "losses within the dtype's tolerance (rnnopt.varlen.LOSS_RTOL)."
)
DPI = 110
NONE = "-"


def _runs(metrics: pd.DataFrame) -> list[str]:
    return sorted(metrics["run"].dropna().unique()) or [NONE]


def _value(row, name: str):
    value = row.get(name)
    return None if value is None or pd.isna(value) else value


def _points(series: pd.DataFrame, source: str) -> pd.DataFrame:
    """batch, tokens_per_s, peak_mib, fits of one autobatch record, in the order tried."""
    rows = series[series["source"] == source]
    table = rows.pivot(index="step", columns="series", values="value")
    return table.reindex(columns=["batch", "tokens_per_s", "peak_mib", "fits"])


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
    for run in _runs(metrics):
        found = []
        for _, row in auto[auto["run"] == run].iterrows():
            found += _autobatch_rows(row, _points(series, row["source"]))
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


class NoData(Exception):
    """The records a figure needs are not there; the message says which."""


def autobatch_figure(metrics: pd.DataFrame, series: pd.DataFrame):
    """Per autobatch record: tokens/s (top) and peak MiB (bottom) against B, every point tried,
    the linear fit, the budget line and the pick."""
    auto = wide.records(metrics, "autobatch")
    auto = auto[auto["status"] == "ok"]
    if auto.empty:
        raise NoData("no ok autobatch records")
    fig, axes = plt.subplots(2, len(auto), figsize=(6.5 * len(auto), 7), squeeze=False)
    for column, (_, row) in enumerate(auto.iterrows()):
        points = _points(series, row["source"]).sort_values("batch")
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
        bottom.set_ylabel("peak heap, MiB (rnnopt.heap)")
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
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    missing = {}
    for name, make in (("autobatch", autobatch_figure), ("varlen", varlen_figure)):
        try:
            fig, missing[name] = make(metrics, series), ""
        except NoData as why:
            fig, ax = plt.subplots(figsize=(8, 3))
            ax.axis("off")
            ax.text(0.5, 0.5, f"Not drawn: {why}", ha="center", va="center")
            missing[name] = str(why)
        fig.tight_layout()
        fig.savefig(out_dir / f"{name}.png", dpi=DPI)
        plt.close(fig)
    return missing
