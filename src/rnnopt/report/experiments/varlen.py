"""Variable-length batching (rnnopt varlen): its rows with verdicts and its figure."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from rnnopt.report import wide  # noqa: E402
from rnnopt.report.experiments.rows import record_series  # noqa: E402
from rnnopt.report.figures import NoData  # noqa: E402
from rnnopt.report.intervals import (  # noqa: E402
    FASTER,
    SAME,
    SLOWER,
    THRESHOLD,
    Interval,
    classify,
    paired_ratio_interval,
)
from rnnopt.report.verdicts import (  # noqa: E402
    MIN_TIMED_EPOCHS,
)

WAYS = ("padded", "bucketed", "packed")


def epochs_of(series: pd.DataFrame, source: str) -> dict[str, list[float]]:
    """Each way's epoch times (ms) of one varlen record, in the order run (series
    epoch_ms_<way>; empty in a record without them)."""
    epochs = record_series(series, source, [f"epoch_ms_{way}" for way in WAYS])
    return {way: epochs[f"epoch_ms_{way}"].dropna().tolist() for way in WAYS}


def epoch_speedup(row, way: str, epochs: dict[str, list[float]]) -> Interval | None:
    """Padded / `way` epoch time. The three ways run interleaved, epoch by epoch, so epoch k
    of each is a pair that a drift of the host moves together (run BK: the first four epochs
    of every way 1.5x slower than the last four): the geometric mean of the pairs' ratios with
    the paired t interval (intervals.paired_ratio_interval) over the timed epochs, the last
    epoch_ms.n of each series (the warm-up epoch before them). None without the series."""
    timed = int(min(row["padded.epoch_ms.n"], row[f"{way}.epoch_ms.n"]))
    padded, other = epochs.get("padded", []), epochs.get(way, [])
    if timed < 1 or len(padded) < timed or len(other) < timed:
        return None
    return paired_ratio_interval(padded[-timed:], other[-timed:])


def speed_verdict(speedup: Interval, threshold: float = THRESHOLD) -> str:
    """The threshold rule of the speedups (intervals.classify) on an epoch-time speedup."""
    found = classify(speedup, threshold)
    if found == FASTER:
        return f"supported: {speedup} faster per epoch"
    if found == SLOWER:
        return f"not supported: slower ({speedup})"
    if found == SAME:
        return f"not supported: no meaningful difference ({speedup})"
    return f"inconclusive: {speedup} crosses the {threshold:.0%} threshold"


def varlen_rows(row, epochs: dict[str, list[float]], threshold: float = THRESHOLD) -> list[dict]:
    """The rows of one varlen record; `epochs` its ways' epoch times (epochs_of), judged at
    the report's `threshold`."""
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
        speedup = epoch_speedup(row, way, epochs)
        kernel = way != "packed" or bool(row["packed.packed_kernel"])
        name = way if kernel else "masked (no packed kernel)"
        shown = f"{speedup}, paired by epoch" if speedup is not None else "no epoch times"
        result = (
            f"{label}: {name}: padding {row['padded.padding_fraction']:.0%} -> "
            f"{row[f'{way}.padding_fraction']:.0%}, epoch {row['padded.epoch_ms.median']:.1f} -> "
            f"{row[f'{way}.epoch_ms.median']:.1f} ms ({shown}), "
            f"peak {row['padded.peak_mib']:.2f} -> {row[f'{way}.peak_mib']:.2f} MiB"
        )
        if not kernel:
            verdict = "not measured here: no packed kernel; masking computes every padded step"
        elif not agree:
            verdict = "not supported: the losses differ (see the exactness row)"
        elif min(row["padded.epoch_ms.n"], row[f"{way}.epoch_ms.n"]) < MIN_TIMED_EPOCHS:
            verdict = f"not measured here: fewer than {MIN_TIMED_EPOCHS} timed epochs"
        elif speedup is None:
            verdict = "not judged: the record keeps no epoch times (an older run)"
        else:
            verdict = speed_verdict(speedup, threshold)
        rows.append({"experiment": experiment, "guide": "7", "result": result, "verdict": verdict})
    worst, rtol = row["loss_max_rel_diff"], row["loss_rtol"]
    result = f"{label}: epoch losses of the 3 ways differ by at most {worst:.1e} (relative)"
    verdict = "supported" if agree else f"not supported: {worst:.1e} > tolerance {rtol:g}"
    return [*rows, exact | {"result": result, "verdict": f"{verdict} (tolerance {rtol:g})"}]


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
