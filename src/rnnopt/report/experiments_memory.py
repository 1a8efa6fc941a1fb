"""Report of three guide questions: weights against the cache (C13), garbage collection and
object churn (C2, C12), and precision's effect on the result (C6, C11). One table of rows with
verdicts (experiment, claim, run, result, verdict) and the per-point tables behind it.

Verdicts, per run (host), by the documented thresholds below:
- C13, per variant and phase of a hidden-size sweep (profile records at fixed B, T, I and
  threads with >= MIN_SWEEP_POINTS hidden sizes): supported when the best GFLOP/s with W_hh
  (4H x H) beyond the host's L3 is below CACHE_DROP times the best with W_hh inside L3; not
  measured when no point lies beyond L3 (or none inside) or the cache sizes are unknown.
- C12, per variant of churn records (collector on and off): holds when, with the collector
  on, its collections (timed by gc.callbacks inside the timed calls) take more than
  GC_SHARE_MATTERS of the timed time. Both sides of that share come from one process, so the
  load of a shared machine scales them alike; the on / off mean times of the two processes
  are shown beside it, not judged (they differ by +-20% between processes here). A summary
  row names the variants (and their cyclic garbage per call) where it holds and where not.
- C6 / C11: rnnopt.report.experiments_precision.
"""

from __future__ import annotations

import pandas as pd

from rnnopt.models.flops import SHAPE_KEYS
from rnnopt.report import wide
from rnnopt.report.experiment_rows import (
    COLUMNS,
    format_bytes,
    missing_row,
    number,
    ok_records,
    runs,
)
from rnnopt.report.experiments_precision import (
    OUTPUT_ERROR_MATTERS,
    precision_points,
    precision_rows,
)
from rnnopt.report.verdicts import CACHE_DROP, GC_SHARE_MATTERS, MIN_SWEEP_POINTS, SAME_LOSS

ITEMSIZE = {"float64": 8, "float32": 4, "tfloat32": 4, "bfloat16": 2, "float16": 2}
CACHE_LEVELS = (("l1d", "L1d"), ("l2", "L2"), ("l3", "L3"))
ABOUT = (
    "Weights against the cache (C13): a hidden-size sweep at fixed B, T and I; GFLOP/s from "
    "the analytic FLOP count; W_hh bytes = 4H*H*itemsize, weight bytes per step = "
    "(4H*(I+H) + 8H)*itemsize (every weight and bias read once per step); cache sizes of one "
    "core from the host (sysfs). Verdict: supported when the best GFLOP/s beyond L3 is below "
    f"{CACHE_DROP:.0%} of the best inside L3. GC and churn (C2, C12): each variant timed in "
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


# ---------------------------------------------------------------- weights against the cache


def cache_points(metrics: pd.DataFrame) -> pd.DataFrame:
    """Profile records of every hidden-size sweep, one row per point, with W_hh bytes, weight
    bytes per step and the smallest cache level W_hh fits in ('beyond L3' if none)."""
    profile = ok_records(metrics, "profile")
    keys = ["run", "variant", "dtype", "device", "phase", "threads", "batch", "seq_len"]
    keys.append("input_size")
    if profile.empty:
        return profile.assign(w_hh_bytes=[], weight_bytes_per_step=[], level=[])
    sizes = profile.groupby(keys, dropna=False)["hidden_size"].transform("nunique")
    sweep = profile[sizes >= MIN_SWEEP_POINTS].copy()
    H = sweep["hidden_size"].astype(float)
    itemsize = sweep["dtype"].map(ITEMSIZE).astype(float)
    sweep["w_hh_bytes"] = 4 * H * H * itemsize
    weights = 4 * H * (sweep["input_size"].astype(float) + H) + 8 * H
    sweep["weight_bytes_per_step"] = weights * itemsize
    sweep["level"] = [_level(row) for _, row in sweep.iterrows()]
    return sweep.sort_values([*keys, "hidden_size"]).reset_index(drop=True)


def _level(row) -> str | None:
    """'L1d' / 'L2' / 'L3': the smallest cache W_hh fits in; 'beyond L3'; None if unknown."""
    sizes = [(name, number(row.get(f"{key}_bytes"))) for key, name in CACHE_LEVELS]
    if any(size is None for _, size in sizes):
        return None
    for name, size in sizes:
        if row["w_hh_bytes"] <= size:
            return name
    return "beyond L3"


def cache_verdict(points: pd.DataFrame) -> tuple[str, str]:
    """(result, verdict) of one sweep (one run, variant, dtype, phase, threads)."""
    cells = [
        f"H={int(r.hidden_size)} ({format_bytes(r.w_hh_bytes)}, {r.level or '?'}) {r.gflops:.1f}"
        for r in points.itertuples()
    ]
    result = "GFLOP/s by H (W_hh, where it fits): " + "; ".join(cells)
    if points["level"].isna().any():
        return result, "not measured here: the host's cache sizes are unknown"
    inside = points.loc[points["level"] != "beyond L3", "gflops"]
    beyond = points.loc[points["level"] == "beyond L3", "gflops"]
    if inside.empty or beyond.empty:
        where = "beyond" if beyond.empty else "inside"
        return result, f"not measured here: no hidden size with W_hh {where} L3"
    ratio = beyond.max() / inside.max()
    result += f"; best beyond L3 / best inside {ratio:.2f}x"
    if ratio < CACHE_DROP:
        return result, f"supported: a drop at the L3 boundary ({ratio:.2f}x < {CACHE_DROP})"
    return result, f"not supported: no drop at the L3 boundary ({ratio:.2f}x >= {CACHE_DROP})"


def cache_rows(metrics: pd.DataFrame, run: str) -> list[dict]:
    points = cache_points(metrics)
    points = points[points["run"] == run]
    rows = []
    for (variant, dtype, phase, threads), group in points.groupby(
        ["variant", "dtype", "phase", "threads"], sort=True
    ):
        result, verdict = cache_verdict(group)
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


# ---------------------------------------------------------------- garbage collection


def gc_pairs(metrics: pd.DataFrame) -> pd.DataFrame:
    """Churn records side by side, one row per (run, variant, dtype, shape, phase, threads):
    columns <metric>_on and <metric>_off."""
    churn = ok_records(metrics, "churn")
    if churn.empty or "gc_enabled" not in churn:
        return pd.DataFrame()
    keys = ["run", "variant", "dtype", "device", "phase", "threads"]
    keys += list(SHAPE_KEYS)
    on, off = churn[churn["gc_enabled"] == 1], churn[churn["gc_enabled"] == 0]
    return on.merge(off, on=keys, suffixes=("_on", "_off"))


def gc_holds(row) -> bool:
    """C12 for one pair: the collections take over GC_SHARE_MATTERS of the timed time."""
    return row["gc.share_on"] > GC_SHARE_MATTERS


def gc_result(row) -> str:
    calls = int(row["time_ms.n_on"])
    slowdown = row["time_ms.mean_on"] / row["time_ms.mean_off"]
    collections = "/".join(str(int(row[f"gc.gen{g}_on"])) for g in range(3))
    return (
        f"collector on / off: median {row['time_ms.median_on']:.2f} / "
        f"{row['time_ms.median_off']:.2f} ms, mean {row['time_ms.mean_on']:.2f} / "
        f"{row['time_ms.mean_off']:.2f} ms ({slowdown:.2f}x); "
        f"GC {row['gc.share_on']:.1%} of the timed time, {collections} collections of "
        f"generations 0/1/2 in {calls} calls; "
        f"{row['objects.cyclic_garbage_per_call_on']:.0f} cyclic garbage objects per call, "
        f"gen0 counter +{row['objects.gen0_growth_per_step_on']:.1f} per step"
    )


def gc_rows(metrics: pd.DataFrame, run: str) -> list[dict]:
    pairs = gc_pairs(metrics)
    pairs = pairs[pairs["run"] == run] if not pairs.empty else pairs
    if pairs.empty:
        return [missing_row("garbage collection and object churn", "C2, C12", "no churn records")]
    rows, holds, not_holds = [], [], []
    for _, row in pairs.iterrows():
        name = f"{row['variant']} {wide.DTYPE_SHORT[row['dtype']]}"
        garbage = f"{row['objects.cyclic_garbage_per_call_on']:.0f} cyclic garbage/call"
        holds_here = gc_holds(row)
        (holds if holds_here else not_holds).append(f"{name} ({garbage})")
        share = f"GC {row['gc.share_on']:.1%} of the timed time"
        verdict = (
            f"supported: {share} (> {GC_SHARE_MATTERS:.0%})"
            if holds_here
            else f"not supported: {share} (<= {GC_SHARE_MATTERS:.0%})"
        )
        rows.append(
            {
                "experiment": f"GC on vs off: {name} {row['phase']}, {wide.shape_label(row)}",
                "claim": "C2, C12",
                "result": gc_result(row),
                "verdict": verdict,
            }
        )
    rows.append(
        {
            "experiment": "GC: when C12 holds",
            "claim": "C12",
            "result": "holds for: "
            + (", ".join(holds) or "none")
            + "; not for: "
            + (", ".join(not_holds) or "none"),
            "verdict": f"supported for {len(holds)} of {len(pairs)} variants"
            if holds
            else "not supported for any variant measured",
        }
    )
    return rows


def table(metrics: pd.DataFrame) -> pd.DataFrame:
    """experiment, claim, run, result, verdict: the three experiments of every run."""
    rows = []
    for run in runs(metrics):
        for part in (cache_rows, gc_rows, precision_rows):
            rows += [{"run": run, **row} for row in part(metrics, run)]
    return pd.DataFrame(rows, columns=COLUMNS)


def point_tables(metrics: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The numbers behind the rows: weights_vs_cache, gc_churn, precision (CSV tables)."""
    cache = cache_points(metrics)
    cache_columns = ["run", "variant", "dtype", "phase", "threads", *wide.SHAPE_KEYS]
    cache_columns += ["w_hh_bytes", "weight_bytes_per_step", "level", "time_ms.median", "gflops"]
    precision = precision_points(metrics)
    return {
        "weights_vs_cache": cache[cache_columns] if not cache.empty else pd.DataFrame(),
        "gc_churn": gc_pairs(metrics),
        "precision": precision,
    }
