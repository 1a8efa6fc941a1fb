"""The report's tables as DataFrames: optimisation comparison, verification, variant detail,
measurement checks. Every run (host) gets its own columns, side by side."""

from __future__ import annotations

import pandas as pd

from rnnopt.report import wide
from rnnopt.report.comparisons import COMPARISONS, Comparison
from rnnopt.report.measure import Outcome, RunData, measure
from rnnopt.report.verdicts import verdict

NONE = "-"


def runs(metrics: pd.DataFrame) -> list[str]:
    return sorted(metrics["run"].dropna().unique())


def run_data(metrics: pd.DataFrame) -> dict[str, RunData]:
    frames = {kind: wide.records(metrics, kind) for kind in ("profile", "memory", "train")}
    failed = wide.failed_verification(metrics)
    return {
        run: RunData(
            *(frames[kind][frames[kind]["run"] == run] for kind in ("profile", "memory", "train")),
            failed_verification=failed,
        )
        for run in runs(metrics)
    }


def _cells(comparison: Comparison, outcome: Outcome) -> dict[str, str]:
    speed = outcome.speed_text or (str(outcome.speedup) if outcome.speedup else NONE)
    if outcome.gc_share is not None:
        candidate, baseline = outcome.gc_share
        speed += f"; GC {baseline:.1%} -> {candidate:.1%} of time"
    if outcome.notes:
        speed += f" ({'; '.join(outcome.notes)})"
    memory = f"{outcome.memory_ratio:.2f}x" if outcome.memory_ratio is not None else NONE
    if outcome.allocations is not None:
        candidate, baseline = outcome.allocations
        memory += f"; buffers/step {baseline:.1f} -> {candidate:.1f}"
    if outcome.loss_text:
        loss = outcome.loss_text
    elif outcome.loss_change is not None:
        loss = f"{outcome.loss_change:+.1%}"
    else:
        loss = NONE
    return {
        "speedup": speed,
        "peak memory": memory,
        "loss": loss,
        "verdict": verdict(comparison, outcome),
    }


def comparison_table(metrics: pd.DataFrame, comparisons=COMPARISONS) -> pd.DataFrame:
    """One row per optimisation; per run: speedup (interval), peak memory, loss, verdict."""
    data = run_data(metrics)
    rows = []
    for comparison in comparisons:
        row = {
            "optimisation": comparison.optimisation,
            "claim": ", ".join(comparison.claims),
            "compared": comparison.compared,
        }
        for run, run_frames in data.items():
            cells = _cells(comparison, measure(comparison, run_frames, run))
            row.update({f"{run}: {name}": text for name, text in cells.items()})
        rows.append(row)
    return pd.DataFrame(rows)


def _verify_cell(row) -> str:
    if row["status"] != "ok":
        return f"{row['status']}: {row['reason']}"
    errors = [v for k, v in row.items() if str(k).startswith("max_rel_error.") and pd.notna(v)]
    worst = max(errors) if errors else float("nan")
    result = "pass" if row.get("passed") == 1 else "FAIL"
    return f"{result} {worst:.1e} (tol {row.get('tolerance', float('nan')):.0e})"


def verification_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """(variant, dtype, device) x run: pass/FAIL, worst relative error, tolerance, or why not."""
    verify = wide.verification(metrics)
    if verify.empty:
        return pd.DataFrame(columns=["variant", "dtype", "device"])
    verify = verify.assign(result=[_verify_cell(row) for _, row in verify.iterrows()])
    table = verify.pivot_table(
        index=["variant", "dtype", "device"], columns="run", values="result", aggfunc="first"
    )
    table.columns.name = None
    return table.reset_index().fillna(NONE)


def _number(value, fmt: str) -> str:
    return NONE if pd.isna(value) else format(value, fmt)


def variants_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """Every profile record: time, throughput, GFLOP/s, fraction of peak, noisy, status."""
    profile = wide.records(metrics, "profile")
    failed = wide.failed_verification(metrics)
    rows = []
    for _, r in profile.iterrows():
        verified = (r["run"], r["variant"], r["dtype"], r["device"]) not in failed
        rows.append(
            {
                "run": r["run"],
                "variant": r["variant"],
                "dtype": r["dtype"],
                "device": r["device"],
                "shape": wide.shape_text(r),
                "phase": r["phase"],
                "threads": r["threads"],
                "status": r["status"] if r["status"] == "ok" else f"{r['status']}: {r['reason']}",
                "time ms (IQR)": _time(r),
                "tokens/s": _number(r.get("tokens_per_s"), ",.0f"),
                "GFLOP/s": _number(r.get("gflops"), ".2f"),
                "% of peak": _number(100 * r.get("peak_fraction", float("nan")), ".1f"),
                "compile s": _number(r.get("compile_s"), ".1f"),
                "noisy": "noisy" if r.get("noisy") == 1 else "",
                "verified": "" if verified else "FAILED",
            }
        )
    columns = ["run", "variant", "dtype", "device", "shape", "phase", "threads"]
    table = pd.DataFrame(rows)
    return table.sort_values(columns, kind="stable").reset_index(drop=True) if rows else table


def _time(r) -> str:
    if pd.isna(r.get("time_ms.median")):
        return NONE
    return f"{r['time_ms.median']:.3g} ({r.get('time_ms.iqr', float('nan')):.2g})"


def checks_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """GEMM peaks and the timer cross-check, per run and thread count."""
    rows = []
    for kind in ("peak", "timer-check"):
        frame = metrics[(metrics["kind"] == kind) & metrics["metric"].notna()]
        if kind == "peak":
            frame = frame[frame["metric"].str.startswith("gemm_gflops.")]
        else:
            frame = frame[frame["metric"].isin(["ratio", "agrees"])]
        for _, r in frame.iterrows():
            rows.append(
                {
                    "run": r["run"],
                    "check": kind,
                    "threads": r["threads"],
                    "metric": r["metric"],
                    "value": _number(r["value"], ".3g"),
                }
            )
        for _, r in metrics[(metrics["kind"] == kind) & (metrics["status"] != "ok")].iterrows():
            rows.append(
                {
                    "run": r["run"],
                    "check": kind,
                    "threads": r["threads"],
                    "metric": r["status"],
                    "value": r["reason"],
                }
            )
    return pd.DataFrame(rows, columns=["run", "check", "threads", "metric", "value"])
