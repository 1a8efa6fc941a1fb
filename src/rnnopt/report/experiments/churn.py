"""GC and object churn (C2, C12; rnnopt churn): rows with verdicts and the figure."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from rnnopt.models.flops import SHAPE_KEYS  # noqa: E402
from rnnopt.report import wide  # noqa: E402
from rnnopt.report.experiments.rows import first_run, missing_row, ok_records  # noqa: E402
from rnnopt.report.verdicts import (  # noqa: E402
    GC_SHARE_MATTERS,
)


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


def gc_churn(metrics: pd.DataFrame, series: pd.DataFrame):
    run, pairs = first_run(gc_pairs(metrics), "churn records (collector on and off)")
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
