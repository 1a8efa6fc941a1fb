"""Automatic batch size (rnnopt autobatch): its rows with verdicts and its figure."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from rnnopt.report import wide  # noqa: E402
from rnnopt.report.experiments.rows import number, record_series  # noqa: E402
from rnnopt.report.figures import NoData  # noqa: E402
from rnnopt.report.intervals import paired_ratio_interval  # noqa: E402
from rnnopt.report.verdicts import (  # noqa: E402
    LINEAR_R2,
    SAME_THROUGHPUT,
)
from rnnopt.report.wide import NONE  # noqa: E402


def autobatch_rows(row, points: pd.DataFrame, rounds: pd.DataFrame | None = None) -> list[dict]:
    """The pick's row and the memory model's row of one autobatch record: its points
    (points_of) and its confirmation rounds (rounds_of; none in records before them)."""
    what = f"{wide.label(row)} {row['phase']}, T={row['seq_len']} I={row['input_size']}: "
    pick_row = {"experiment": "automatic batch size under a memory budget", "guide": "4, 7; C4"}
    linear_row = {"experiment": "peak memory linear in the batch size", "guide": "4; C3"}
    if row["status"] != "ok":
        why = f"not measured here: {row['status']}: {row['reason']}"
        return [entry | {"result": NONE, "verdict": why} for entry in (pick_row, linear_row)]
    budget = row["budget_mib"]
    pick_batch = int(row["pick_batch"])
    largest = int(row["max_fitting_batch"])
    ratio = number(row.get("pick_over_batch1_tokens_per_s"))
    result = (
        f"{what}budget {budget:g} MiB: pick B={pick_batch}, {row['pick_tokens_per_s']:.3g} "
        f"tokens/s"
        + (f" ({ratio:.1f}x B=1)" if ratio else "")
        + f", peak {row['pick_peak_mib']:.2f} MiB; largest fitting B={largest}; "
        f"{int(row['points_tried'])} points"
    )
    confirmed = _confirmed(row, rounds, largest)
    if confirmed is not None:
        other, interval, how = confirmed
        result += (
            f"; timed again side by side over {how}: B={other} {interval} the tokens/s of "
            f"B={largest}"
        )
    if not row["budget_binding"]:
        verdict = f"not measured here: the budget never binds up to max_batch={largest}"
    elif confirmed is not None:
        verdict = _confirmed_verdict(*confirmed[:2], largest)
    else:  # a record before the confirmation rounds: the search's one timing a point
        fitting = points[points["fits"] == 1]
        largest_tps = fitting.loc[fitting["batch"] == largest, "tokens_per_s"].max()
        if largest_tps >= (1 - SAME_THROUGHPUT) * row["pick_tokens_per_s"]:
            verdict = SUPPORTED.format(largest=largest)
        else:
            times = row["pick_tokens_per_s"] / largest_tps
            verdict = (
                f"not supported: B={pick_batch} gives {times:.2f}x the tokens/s of the largest "
                f"fitting B={largest}"
            )
    r2 = number(row.get("fit.r2"))
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


SUPPORTED = (
    "supported: the largest fitting batch B={largest} is (within "
    + f"{SAME_THROUGHPUT:.0%}) the fastest"
)


def _confirmed(row, rounds: pd.DataFrame | None, largest: int):
    """(the other contender's batch, its tokens/s over the largest fitting batch's with the
    interval over the rounds the pick rests on, paired by round, and a phrase saying which
    rounds those are) from the confirmation timings (rounds_of); None without them."""
    if rounds is None or rounds.empty or largest not in set(rounds["batch"]):
        return None
    others = set(rounds["batch"]) - {largest}
    if len(others) != 1 or len(rounds) % 2:
        return None
    other = others.pop()
    used = rounds[rounds["kept"]].reset_index(drop=True)
    by_round = used.assign(round=used.index // 2).pivot(
        index="round", columns="batch", values="tokens_per_s"
    )
    interval = paired_ratio_interval(by_round[other], by_round[largest])
    if interval is None:
        return None
    total, kept_rounds = len(rounds) // 2, len(used) // 2
    clean = number(row.get("confirm_clean_rounds"))
    if kept_rounds < total:
        how = f"{kept_rounds} rounds ({total - kept_rounds} more left out: a slow spell)"
    elif clean is not None and clean < total:
        how = f"{total} rounds ({total - int(clean)} in a slow spell, kept: too few without)"
    else:
        how = f"{total} rounds"
    return other, interval, how


def _confirmed_verdict(other: int, interval, largest: int) -> str:
    """The pick's verdict from the confirmation rounds: the other contender's tokens/s over the
    largest fitting batch's, judged by its interval against SAME_THROUGHPUT (the threshold
    rule of the speedups: a difference only where the whole interval says so)."""
    if not interval.has_interval:
        return "not judged: one confirmation round: no interval"
    bound = 1 + SAME_THROUGHPUT
    said = f"B={other} gives {interval} the tokens/s of the largest fitting B={largest}"
    if interval.high <= bound:
        return SUPPORTED.format(largest=largest) + f": {said}"
    if interval.low > bound:
        return f"not supported: {said}"
    return f"inconclusive: {said}, across the {SAME_THROUGHPUT:.0%} that makes a difference"


POINT_SERIES = ["batch", "tokens_per_s", "peak_mib", "fits"]
ROUND_SERIES = {
    "confirm_batch": "batch",
    "confirm_tokens_per_s": "tokens_per_s",
    "confirm_probe_ms": "probe_ms",
    "confirm_kept": "kept",
}


def points_of(series: pd.DataFrame, source: str) -> pd.DataFrame:
    """batch, tokens_per_s, peak_mib, fits of one autobatch record, in the order tried."""
    return record_series(series, source, POINT_SERIES)


def rounds_of(series: pd.DataFrame, source: str) -> pd.DataFrame:
    """batch, tokens_per_s, probe_ms, kept (whether the pick rests on it) of one autobatch
    record's confirmation timings, in the order timed (empty in a record before them)."""
    rounds = record_series(series, source, ROUND_SERIES).rename(columns=ROUND_SERIES).dropna()
    return rounds.astype({"batch": int, "kept": bool})


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
            f"{row['run']}:\n{wide.label(row)} {row['phase']}, "
            f"T={row['seq_len']} I={row['input_size']} H={row['hidden_size']}",
            fontsize=9,
        )
        # records with confirmation rounds time each point by its fast calls, older ones by
        # their median call
        fast = not rounds_of(series, row["source"]).empty
        top.set_ylabel(f"tokens/s ({'10th-percentile' if fast else 'median'} call)")
        bottom.set_ylabel("peak heap, MiB (rnnopt.measure.heap)")
        bottom.set_xlabel("batch size B (log scale)")
        top.legend(fontsize=7)
        bottom.legend(fontsize=7)
    title = "Automatic batch size: every point measured,\nthe budget and the pick"
    fig.suptitle(title, fontsize=11)
    return fig
