"""Weights against the cache (C13, a hidden-size sweep of rnnopt profile): rows, figure."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from rnnopt.report import wide  # noqa: E402
from rnnopt.report.experiments.rows import first_run, format_bytes, missing_row, number, ok_records  # noqa: E402
from rnnopt.report.intervals import Interval, differs_from_reference, ratio_interval  # noqa: E402
from rnnopt.report.roofline import roofline_points  # noqa: E402
from rnnopt.report.verdicts import (  # noqa: E402
    CACHE_DROP,
    MIN_SWEEP_POINTS,
)

ITEMSIZE = {"float64": 8, "float32": 4, "tfloat32": 4, "bfloat16": 2, "float16": 2}


CACHE_LEVELS = (("l1d", "L1d"), ("l2", "L2"), ("l3", "L3"))


def cache_points(metrics: pd.DataFrame) -> pd.DataFrame:
    """Profile records of every hidden-size sweep, one row per point, with W_hh bytes, the bytes
    of it each thread reads (its slice for the persistent rung, which splits W_hh over its
    threads; all of it otherwise), weight bytes per step and the smallest cache level the
    weights fit in ('beyond L3' if none)."""
    profile = ok_records(metrics, "profile")
    keys = ["run", "variant", "dtype", "device", "phase", "threads", "batch", "seq_len"]
    keys.append("input_size")
    if profile.empty:
        return profile.assign(
            w_hh_bytes=[], w_hh_bytes_per_thread=[], weight_bytes_per_step=[], level=[]
        )
    sizes = profile.groupby(keys, dropna=False)["hidden_size"].transform("nunique")
    sweep = profile[sizes >= MIN_SWEEP_POINTS].copy()
    H = sweep["hidden_size"].astype(float)
    itemsize = sweep["dtype"].map(ITEMSIZE).astype(float)
    sweep["w_hh_bytes"] = 4 * H * H * itemsize
    split = sweep["variant"].str.endswith("-persistent")
    sweep["w_hh_bytes_per_thread"] = sweep["w_hh_bytes"] / sweep["threads"].where(split, 1)
    weights = 4 * H * (sweep["input_size"].astype(float) + H) + 8 * H
    sweep["weight_bytes_per_step"] = weights * itemsize
    sweep["level"] = [_level(row) for _, row in sweep.iterrows()]
    return sweep.sort_values([*keys, "hidden_size"]).reset_index(drop=True)


def _level(row) -> str | None:
    """'L1d' / 'L2' / 'L3': the smallest cache W_hh fits in (a core's private L1d and L2 hold
    its thread's part, the shared L3 all of it); 'beyond L3'; None if unknown."""
    sizes = [(name, number(row.get(f"{key}_bytes"))) for key, name in CACHE_LEVELS]
    if any(size is None for _, size in sizes):
        return None
    for name, size in sizes:
        per_thread = row.get("w_hh_bytes_per_thread", row["w_hh_bytes"])
        needed = row["w_hh_bytes"] if name == "L3" else per_thread
        if needed <= size:
            return name
    return "beyond L3"


def _weights_text(point) -> str:
    """W_hh's bytes, and each thread's part where the threads split it."""
    text = format_bytes(point.w_hh_bytes)
    per_thread = getattr(point, "w_hh_bytes_per_thread", point.w_hh_bytes)
    if per_thread < point.w_hh_bytes:
        text += f", {format_bytes(per_thread)} a thread"
    return text


def predicted_ratio(points: pd.DataFrame, beyond, inside) -> float | None:
    """What the roofline predicts for best beyond L3 / best inside: the attainable GFLOP/s
    (rnnopt.report.roofline) of the points that were best on either side (their indices);
    None when the run has no bandwidth figures."""
    if "attainable_gflops" not in points:
        return None
    attainable = points["attainable_gflops"]
    low, high = attainable.get(beyond), attainable.get(inside)
    if low is None or high is None or pd.isna(low) or pd.isna(high):
        return None
    return float(low) / float(high)


def ratio_of_best(points: pd.DataFrame, beyond, inside) -> Interval | None:
    """GFLOP/s of the best point beyond L3 over the best inside, with the interval over their
    processes (rnnopt.report.intervals: each process's FLOPs / its time); None where the
    records do not keep their processes' times."""
    if "process_times" not in points or "flops" not in points:
        return None
    sides = []
    for index in (beyond, inside):
        times = points.at[index, "process_times"]
        flops = points.at[index, "flops"]
        if not isinstance(times, tuple) or not times or pd.isna(flops):
            return None
        sides.append([float(flops) / (t / 1e3) / 1e9 for t in times])
    return ratio_interval(*sides)


def sweep_key(points: pd.DataFrame) -> tuple[str, str]:
    """(candidate, baseline): what a rerun spread keys one sweep's ratio by (the ratio of its
    best point beyond L3 to its best inside, whichever hidden sizes those are)."""
    first = points.iloc[0]
    shape = f"b{int(first['batch'])}-t{int(first['seq_len'])}-i{int(first['input_size'])}"
    sweep = (
        f"weights vs cache {first['variant']} {first['dtype']} {first['device']} {shape} "
        f"threads{int(first['threads'])} {first['phase']}"
    )
    return f"{sweep}: best beyond L3", f"{sweep}: best inside L3"


def best_sides(points: pd.DataFrame):
    """(index of the best point beyond L3, of the best inside) of one sweep; None where a
    cache size is unknown or a side has no point."""
    if points["level"].isna().any():
        return None
    inside = points.loc[points["level"] != "beyond L3", "gflops"]
    beyond = points.loc[points["level"] == "beyond L3", "gflops"]
    if inside.empty or beyond.empty:
        return None
    return beyond.idxmax(), inside.idxmax()


def sweeps(points: pd.DataFrame):
    """(variant, dtype, phase, threads), points of each sweep in cache_points' rows."""
    return points.groupby(["variant", "dtype", "phase", "threads"], sort=True)


def sweep_ratios(metrics: pd.DataFrame):
    """(run, sweep_key, the ratio's interval over this run's processes, whether a point rests
    on a process a slow spell slowed) of every sweep with both sides: what
    rnnopt.report.rerun_spread measures its between-run spread and pooled ratio by."""
    points = cache_points(metrics)
    for run, of_run in points.groupby("run", sort=True):
        for _, group in sweeps(of_run):
            best = best_sides(group)
            interval = ratio_of_best(group, *best) if best is not None else None
            if interval is not None:
                spelled = "spell_kept" in group and group.loc[list(best), "spell_kept"].sum() > 0
                yield run, sweep_key(group), interval, bool(spelled)


def cache_verdict(points: pd.DataFrame, spread: dict | None = None) -> tuple[str, str]:
    """(result, verdict) of one sweep (one run, variant, dtype, phase, threads), beside what
    the bandwidth roofs predict where the run measured them. `spread` (sweep_key ->
    rerun_spread.PairSpread: this host's reference runs) widens the ratio's interval by the
    host's between-run spread, and where this run agrees with the reference runs the
    verdict reads their pooled ratio (as the speedups' verdicts: docs/intervals.md)."""
    cells = [
        f"H={int(r.hidden_size)} ({_weights_text(r)}, {r.level or '?'}) {r.gflops:.1f}"
        for r in points.itertuples()
    ]
    result = "GFLOP/s by H (W_hh, where it fits): " + "; ".join(cells)
    if points["level"].isna().any():
        return result, "not measured here: the host's cache sizes are unknown"
    best = best_sides(points)
    if best is None:
        where = "beyond" if (points["level"] != "beyond L3").all() else "inside"
        return result, f"not measured here: no hidden size with W_hh {where} L3"
    interval = ratio_of_best(points, *best)
    reference = spread.get(sweep_key(points)) if spread else None
    if interval is not None and reference is not None:
        interval = reference.applied(interval)
    beyond, inside = points.at[best[0], "gflops"], points.at[best[1], "gflops"]
    ratio = interval.judged.median if interval is not None else beyond / inside
    shown = str(interval) if interval is not None else f"{ratio:.2f}x"
    result += f"; best beyond L3 / best inside {shown}"
    predicted = predicted_ratio(points, *best)
    if predicted is not None:
        result += f"; the roofline predicts {predicted:.2f}x"
    if interval is not None and not interval.has_interval:
        # one process a point: no spread between processes, so no verdict (as the speedups)
        return result, "not judged: one process a point: no interval"
    if interval is not None:
        judged = interval.judged
        # decimals enough that no end of the interval the verdict reads prints as the bound
        fewest = 3 if interval.reads_reference else 2
        named = interval.shown(judged.digits_apart(CACHE_DROP, fewest))
        low, high = judged.low, judged.high
    else:  # records without their processes' times (older runs): the point alone
        low = high = ratio
        named = shown
    if high < CACHE_DROP:
        verdict = f"supported: a drop at the L3 boundary ({named} < {CACHE_DROP})"
    elif low >= CACHE_DROP:
        verdict = f"not supported: no drop at the L3 boundary ({named} >= {CACHE_DROP})"
    else:
        verdict = f"inconclusive: {named} crosses the {CACHE_DROP} that makes a drop"
    if interval is not None and interval.agrees is False:
        verdict += differs_from_reference(interval.reference_runs, [interval.against_reference()])
    if predicted is not None:
        drop_predicted = predicted < CACHE_DROP
        verdict += (
            "; the bandwidth roofs agree" if drop_predicted == (ratio < CACHE_DROP)
            else "; the bandwidth roofs predict " + ("a drop" if drop_predicted else "none")
            + ": what limits these points is not DRAM bandwidth alone"
        )  # fmt: skip
    return result, verdict


def cache_rows(metrics: pd.DataFrame, run: str, spread: dict | None = None) -> list[dict]:
    """The rows of one run's sweeps; `spread` as cache_verdict takes it (this run's)."""
    points = cache_points(metrics)
    points = points[points["run"] == run]
    if not points.empty:
        points = roofline_points(points, wide.records(metrics, "peak"))
    rows = []
    for (variant, dtype, phase, threads), group in sweeps(points):
        result, verdict = cache_verdict(group, spread)
        first = group.iloc[0]
        fixed = f"B={first['batch']} T={first['seq_len']} I={first['input_size']}"
        rows.append(
            {
                "experiment": f"weights vs cache: {variant} {wide.DTYPE_SHORT[dtype]} {phase}, "
                f"{fixed}, {threads} thread{'s' if threads > 1 else ''}",
                "claim": "C13",
                "result": result,
                "verdict": verdict,
            }
        )
    if not rows:
        rows.append(missing_row("weights vs cache (hidden-size sweep)", "C13", "no sweep records"))
    return rows


def weights_vs_cache(metrics: pd.DataFrame, series: pd.DataFrame):
    run, points = first_run(cache_points(metrics), "hidden-size sweep (profile records)")
    points = wide.with_labels(points)
    threads = points["threads"].astype(int).astype(str)
    points["curve"] = points["label"] + " " + points["phase"] + ", " + threads + " thr"
    fig, ax = plt.subplots(figsize=(8, 4.5))
    sns.lineplot(points, x="w_hh_bytes_per_thread", y="gflops", hue="curve", marker="o", ax=ax)
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
    ax.set_xlabel("W_hh bytes a thread reads (4H x H x itemsize; persistent: its slice), log")
    ax.set_ylabel("achieved GFLOP/s")
    ax.set_title(
        f"Weights against the cache (C13), {run}: B={first['batch']} T={first['seq_len']} "
        f"I={first['input_size']}"
    )
    ax.legend(fontsize=8)
    return fig
