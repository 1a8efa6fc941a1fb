"""The report's section "Persistent weights": the persistent NumPy rung against nn.LSTM
(oneDNN) per shape, thread count and phase, with its targets, its time split and what the
host's GEMM ceiling allows."""

from __future__ import annotations

import math

import pandas as pd

from rnnopt.report import wide
from rnnopt.report.comparisons import Side
from rnnopt.report.experiments.rows import format_bytes, number
from rnnopt.report.intervals import Interval, geometric_mean
from rnnopt.report.outcomes import pairs, speedup
from rnnopt.report.wide import NONE

PERSISTENT = Side("numpy-*-persistent", "float32", "cpu")
LIBRARY = Side("torch-*-nn", "float32", "cpu")
PHASES = ("forward", "step")
# The speedups over nn.LSTM the rung is built to reach: no slower on one thread, 15% faster
# on all cores; the best float32 rung at this share of the host's GEMM ceiling.
TARGET_ONE_THREAD, TARGET_ALL_CORES, CEILING_TARGET = 1.0, 1.15, 0.85
MET, NOT_MET, INCONCLUSIVE, NOT_JUDGED = "met", "not met", "inconclusive", "not judged"
ABOUT = (
    "The persistent rung (numpy-*-persistent: hidden units split over a team of threads, each "
    "keeping its slice of W_hh for the whole sequence, one spinning barrier per step) against "
    "nn.LSTM (oneDNN), float32, per shape, thread count and phase. Speedup: nn.LSTM's time / "
    "the rung's, with its 95% interval over processes, as in the comparison table. Target: "
    f"{TARGET_ONE_THREAD:.2f}x on one thread, {TARGET_ALL_CORES:.2f}x on more; met when the "
    "whole interval reaches it, not met when none of it does, inconclusive otherwise (not "
    "judged with one process a side). Where the host's reference runs measured the pair and "
    "this run agrees with them, the target is judged over their pooled speedup, as the "
    "comparison table's verdicts are (docs/intervals.md, 'Verdicts from the reference "
    "runs'). W_hh per thread: the slice each thread keeps, and "
    "whether it fits one core's L2. Split (forward): the GEMMs alone, the barrier wait "
    "(GEMMs and barriers, minus the GEMMs), the rest (rnnopt.measure.split). % of ceiling: "
    "the rung's GFLOP/s over the host's best float32 GEMM at that thread count. At the "
    "ceiling: the speedup over nn.LSTM were every FLOP of the rung run at that ceiling, the "
    "most any implementation of these FLOPs could show here."
)
NUMBER_COLUMNS = (
    "run", "cell", "shape", "threads", "phase", "persistent_ms", "nn_ms", "speedup", "low",
    "high", "processes", "target", "target_verdict", "reference_runs", "reference_speedup",
    "reference_low", "reference_high", "reference_agrees", "w_hh_per_thread_bytes", "fits_l2",
    "gemm_ms", "barrier_ms", "elementwise_ms", "peak_fraction", "speedup_at_ceiling",
)  # fmt: skip


def _ms(times, median) -> float:
    """The geometric mean of the processes' times, as the speedups divide them."""
    if isinstance(times, tuple) and times:
        return geometric_mean(times)
    return float(median)


def target_of(threads: int) -> float:
    return TARGET_ONE_THREAD if threads == 1 else TARGET_ALL_CORES


def target_verdict(low: float | None, high: float | None, target: float) -> str:
    if low is None or high is None or math.isnan(low) or math.isnan(high):
        return NOT_JUDGED
    if low >= target:
        return MET
    return NOT_MET if high < target else INCONCLUSIVE


def numbers(metrics: pd.DataFrame, spread: dict | None = None) -> pd.DataFrame:
    """One row per run, cell, shape, thread count and phase where both sides were timed;
    `spread`: run -> its pairs' between-run spread and pooled speedup
    (rnnopt.report.rerun_spread.read), for the runs that have one."""
    profile = wide.records(metrics, "profile")
    matched = pairs(profile, PERSISTENT, LIBRARY) if not profile.empty else pd.DataFrame()
    if matched.empty:
        return pd.DataFrame(columns=list(NUMBER_COLUMNS))
    matched = matched[matched["phase"].isin(PHASES) & (matched["run_c"] == matched["run_b"])]
    rows = []
    for index, r in matched.iterrows():
        threads, H = int(r["threads"]), int(r["hidden_size"])
        persistent_ms = _ms(r["process_times_c"], r["time_ms.median_c"])
        nn_ms = _ms(r["process_times_b"], r["time_ms.median_b"])
        # this pair's speedup, with the reference runs' pooled one where the spread has it
        s = speedup(matched.loc[[index]], spread=(spread or {}).get(r["run_c"], {}))
        s = s or Interval(math.nan, processes=(0, 0))
        pooled = s.reference or Interval(math.nan)
        target = target_of(threads)
        slice_bytes = 4 * H * H * 4 / threads
        l2 = number(r.get("l2_bytes_c"))
        fraction = number(r.get("peak_fraction_c"))
        rows.append(
            {
                "run": r["run_c"],
                "cell": r["cell"],
                "shape": wide.shape_text(r),
                "threads": threads,
                "phase": r["phase"],
                "persistent_ms": persistent_ms,
                "nn_ms": nn_ms,
                "speedup": s.median,
                "low": s.low,
                "high": s.high,
                "processes": s.n,
                "target": target,
                "target_verdict": target_verdict(s.judged.low, s.judged.high, target),
                "reference_runs": s.reference_runs or None,
                "reference_speedup": pooled.median,
                "reference_low": pooled.low,
                "reference_high": pooled.high,
                "reference_agrees": s.agrees,
                "w_hh_per_thread_bytes": slice_bytes,
                "fits_l2": None if l2 is None else slice_bytes < l2,
                "gemm_ms": number(r.get("split.gemm_ms_c")),
                "barrier_ms": number(r.get("split.barrier_ms_c")),
                "elementwise_ms": number(r.get("split.elementwise_ms_c")),
                "peak_fraction": fraction,
                "speedup_at_ceiling": nn_ms / (persistent_ms * fraction) if fraction else None,
            }
        )
    keys = ["run", "cell", "shape", "threads", "phase"]
    return pd.DataFrame(rows, columns=list(NUMBER_COLUMNS)).sort_values(keys, ignore_index=True)


def _text(value, spec: str, suffix: str = "") -> str:
    return NONE if value is None or pd.isna(value) else f"{value:{spec}}{suffix}"


def _target_text(r) -> str:
    """'1.00x: met', and where the reference runs judged it, their pooled speedup; where this
    run differs from them, that it was judged on its own."""
    text = f"{r['target']:.2f}x: {r['target_verdict']}"
    if pd.isna(r["reference_speedup"]):
        return text
    pooled = Interval(r["reference_speedup"], r["reference_low"], r["reference_high"]).text(3)
    runs, agrees = int(r["reference_runs"]), r["reference_agrees"]
    if pd.isna(agrees):  # no interval of its own to agree by
        return text
    if agrees:
        return f"{text} (over this host's {runs} reference runs: {pooled})"
    return f"{text} (this run differs from this host's {runs} reference runs, {pooled})"


def table(metrics: pd.DataFrame, spread: dict | None = None) -> pd.DataFrame:
    """numbers() as the page shows them."""
    rows = []
    for _, r in numbers(metrics, spread).iterrows():
        speedup = _text(r["speedup"], ".2f", "x")
        if not pd.isna(r["low"]):
            speedup += f" ({r['low']:.2f}-{r['high']:.2f})"
        split = NONE
        if not pd.isna(r["gemm_ms"]):
            barrier = _text(r["barrier_ms"], ".3g")
            split = f"{r['gemm_ms']:.3g} / {barrier} / {r['elementwise_ms']:.3g}"
        fits = {True: "fits L2", False: "beyond L2"}.get(r["fits_l2"], "L2 unknown")
        rows.append(
            {
                "run": r["run"],
                "cell": r["cell"],
                "shape": r["shape"],
                "threads": r["threads"],
                "phase": r["phase"],
                "persistent ms": f"{r['persistent_ms']:.3g}",
                "nn.LSTM ms": f"{r['nn_ms']:.3g}",
                "speedup": speedup,
                "target": _target_text(r),
                "W_hh per thread": f"{format_bytes(r['w_hh_per_thread_bytes'])} ({fits})",
                "GEMM / barrier / rest ms": split,
                "% of ceiling": _text(r["peak_fraction"], ".0%"),
                "at the ceiling": _text(r["speedup_at_ceiling"], ".2f", "x"),
            }
        )
    return pd.DataFrame(rows)


def best_rung(metrics: pd.DataFrame) -> str:
    """The sentence on the best float32 CPU rung's share of the GEMM ceiling, per run."""
    profile = wide.records(metrics, "profile")
    if profile.empty or "peak_fraction" not in profile:
        return ""
    rows = profile[
        (profile["status"] == "ok")
        & (profile["dtype"] == "float32")
        & (profile["device"] == "cpu")
        & profile["phase"].isin(PHASES)
    ].dropna(subset=["peak_fraction"])
    sentences = []
    for run, group in rows.groupby("run"):
        best = group.loc[group["peak_fraction"].idxmax()]
        reached = "reaches" if best["peak_fraction"] >= CEILING_TARGET else "stays below"
        sentences.append(
            f"{run}: the best float32 rung, {best['variant']} {best['phase']} at "
            f"{wide.shape_text(best)}, {int(best['threads'])} thread(s), runs at "
            f"{best['peak_fraction']:.0%} of the GEMM ceiling: it {reached} the "
            f"{CEILING_TARGET:.0%} target."
        )
    return " ".join(sentences)
