"""Two result sets compared, B against A: each profile row's time ratio B/A with its interval over
processes, each memory row's exact peak ratio, and the comparison-table verdicts that changed.

A result set is a run folder (results/<run>/) or a results folder holding one run. A profile
row is (variant, dtype, device, phase, shape, threads); its processes are its ok records, each
summarised by its process time (the 2nd percentile of its calls: rnnopt.report.wide.PROCESS_TIME;
intervals.py says why the process is the unit). Memory peaks (memray)
are deterministic, byte-equal from run to run, so their ratio is exact and needs no interval.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from rnnopt.errors import UserError
from rnnopt.report import table
from rnnopt.report.aggregate import SHAPE_KEYS, STAGES, collect
from rnnopt.report.intervals import (
    CONFIDENCE,
    FASTER,
    INCONCLUSIVE,
    SAME,
    SLOWER,
    THRESHOLD,
    Interval,
    change_interval,
    classify,
    geometric_mean,
    ratio_interval,
)
from rnnopt.report.wide import NONE, label, process_time, records, shape_text, undisturbed

KEY = ("variant", "dtype", "device", "phase", *SHAPE_KEYS, "threads")
TIME, PEAK, SPEEDUP = "time", "peak_mib", "speedup"  # the metrics --fail-on takes
SLOWER_B, FASTER_B, NO_CHANGE = "slower", "faster", "no significant change"
ONE_PROCESS = "one process: no interval"
# A speedup's change B/A: "larger" when the optimisation pays more in B.
SPEEDUP_CHANGE = {FASTER: "larger", SLOWER: "smaller", SAME: NO_CHANGE, INCONCLUSIVE: INCONCLUSIVE}
# classify reads a ratio as a speedup: its "faster" is a ratio above 1 + threshold, and a time
# ratio B/A above 1 + threshold means B takes longer.
TIME_CHANGE = {
    FASTER: SLOWER_B,
    SLOWER: FASTER_B,
    SAME: NO_CHANGE,
    INCONCLUSIVE: INCONCLUSIVE,
    None: ONE_PROCESS,
}
SAME_PEAK, LARGER_PEAK, CHANGED_PEAK = "no change", "regression", "changed"
MATCH = ("optimisation", "compared", "shape")  # what pairs comparison-table rows of A and B


@dataclass
class Comparison:
    """Rows of B against A. profile and memory: KEY, a, b, ratio, low, high, processes_a,
    processes_b, change, regression; verdicts: MATCH, speedup/low/high/category/verdict of
    each side (suffixes _a, _b), changed, inside, change_ratio/low/high, speedup_change,
    holds_one."""

    profile: pd.DataFrame
    memory: pd.DataFrame
    verdicts: pd.DataFrame
    only_a: int  # profile rows measured in A only
    only_b: int

    def regressions(self, metric: str) -> int:
        """Rows of `metric` that regress beyond the threshold: a time or a memory peak larger
        in B, an optimisation's speedup smaller in B (its change interval below the bound)."""
        if metric == SPEEDUP:
            return int((self.verdicts["speedup_change"] == "smaller").sum())
        rows = self.profile if metric == TIME else self.memory
        return int(rows["regression"].sum())


def _is_run(folder: Path) -> bool:
    return any((folder / stage).is_dir() for stage in STAGES)


def run_folder(path: str | os.PathLike, run: str | None = None) -> tuple[Path, str]:
    """(results folder, run name) of a result set: a run folder, or a results folder that holds
    exactly one run (or the run named `run`)."""
    path = Path(path)
    if not path.is_dir():
        raise UserError(f"{path}: no such folder")
    if _is_run(path) and run in (None, path.name):
        return path.parent, path.name
    runs = sorted(p.name for p in path.iterdir() if p.is_dir() and _is_run(p))
    if run is not None and run not in runs:
        raise UserError(f"{path}: no run {run!r} in it (runs: {', '.join(runs) or 'none'})")
    if run is None and len(runs) != 1:
        if runs:
            raise UserError(
                f"{path}: holds {len(runs)} runs ({', '.join(runs)}); pick one with --run NAME"
            )
        stages = ", ".join(f"{stage}/" for stage in STAGES[:3])
        raise UserError(f"{path}: holds no run (no folder with {stages} ... in it)")
    return path, run or runs[0]


def load_run(path: str | os.PathLike, run: str | None = None) -> pd.DataFrame:
    """The tidy metrics (aggregate.collect) of one result set's run."""
    results, name = run_folder(path, run)
    metrics, _ = collect(results)
    return metrics[metrics["run"] == name]


def _by_key(rows: pd.DataFrame, metric: str) -> dict[tuple, list[float]]:
    """Each row's values of `metric` from its ok records, one per record (process)."""
    ok = rows[(rows["status"] == "ok") & rows[metric].notna()]
    return {
        key: [float(value) for value in group[metric]]
        for key, group in ok.groupby(list(KEY), dropna=False, sort=True)
    }


def _processes(metrics: pd.DataFrame, kind: str) -> pd.DataFrame:
    """One row per undisturbed record of `kind`; profile rows with their `process_time`
    (rnnopt.report.wide.process_time: what the comparison table's speedups use too)."""
    rows = undisturbed(records(metrics, kind, per_process=True))
    return rows.assign(process_time=process_time(rows)) if kind == "profile" else rows


def _sides(a: pd.DataFrame, b: pd.DataFrame, kind: str, metric: str):
    """(rows of both, rows of A only, rows of B only): {key: (A values, B values)}."""
    a_values, b_values = (_by_key(_processes(side, kind), metric) for side in (a, b))
    both = {key: (a_values[key], b_values[key]) for key in a_values if key in b_values}
    return both, len(a_values) - len(both), len(b_values) - len(both)


NUMBERS = ("a", "b", "ratio", "low", "high", "processes_a", "processes_b", "change", "regression")


def _row(key: tuple, a: float, b: float, ratio: Interval, change: str, regression: bool) -> dict:
    # ratio.processes is (numerator, denominator): (B, A)
    numbers = (a, b, ratio.median, ratio.low, ratio.high, *reversed(ratio.processes), change)
    return dict(zip((*KEY, *NUMBERS), (*key, *numbers, regression), strict=True))


def time_rows(both: dict, threshold: float, confidence: float) -> pd.DataFrame:
    """Per row: the time ratio B/A of the process times, its interval and its change."""
    rows = []
    for key, (a_ms, b_ms) in both.items():
        ratio = ratio_interval(b_ms, a_ms, confidence)
        change = TIME_CHANGE[classify(ratio, threshold)]
        a, b = geometric_mean(a_ms), geometric_mean(b_ms)
        rows.append(_row(key, a, b, ratio, change, change == SLOWER_B))
    return _frame(rows)


def memory_rows(both: dict, threshold: float) -> pd.DataFrame:
    """Per row: the exact peak ratio B/A (peaks are deterministic) and its change."""
    rows = []
    for key, (a_mib, b_mib) in both.items():
        a, b = float(pd.Series(a_mib).median()), float(pd.Series(b_mib).median())
        exact = 1.0 if a == b else (b / a if a else math.inf)
        ratio = Interval(exact, exact, exact, (len(b_mib), len(a_mib)))
        regression = exact > 1 + threshold
        change = SAME_PEAK if a == b else (LARGER_PEAK if regression else CHANGED_PEAK)
        rows.append(_row(key, a, b, ratio, change, regression))
    return _frame(rows)


def _frame(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=[*KEY, *NUMBERS])
    return frame.astype({"low": float, "high": float, "regression": bool})


def _speedup_interval(row, side: str) -> Interval | None:
    """One side's speedup of a verdict row as an Interval, its se and df where it has them."""
    values = {k: row[f"{k}_{side}"] for k in ("speedup", "low", "high", "processes")}
    welch = (row[f"se_log_{side}"], row[f"welch_df_{side}"])
    if any(pd.isna(v) for v in (*values.values(), *welch)):
        return None
    processes = (int(values["processes"]),) * 2
    return Interval(values["speedup"], values["low"], values["high"], processes, *welch)


def verdict_rows(
    numbers_a: pd.DataFrame,
    numbers_b: pd.DataFrame,
    threshold: float = THRESHOLD,
    confidence: float = CONFIDENCE,
) -> pd.DataFrame:
    """Comparison-table rows of both sides (table.comparison_numbers), paired by optimisation,
    compared and shape; `changed` where the verdict's category differs; the speedup's change
    B/A (`change_ratio`, `change_low`, `change_high`: intervals.change_interval, where both
    sides rest on one pair of jobs) and `speedup_change` by the threshold rule (SPEEDUP_CHANGE),
    `holds_one` where that interval holds 1.00x (no change detected); `reference_split` where
    the host's reference runs themselves read the speedup more than one way
    (table.reference_reads): a verdict that changed where they did not is the one to look at."""
    columns = [*MATCH, "speedup", "low", "high", "processes", "se_log", "welch_df"]
    columns += ["category", "verdict", "reference_runs", "reference_agree", "reference_readings"]
    paired = numbers_a[columns].merge(numbers_b[columns], on=list(MATCH), suffixes=("_a", "_b"))
    paired["changed"] = paired["category_a"] != paired["category_b"]
    # Did the host's reference runs themselves read the speedup more than one way? NA where
    # neither side has reads (rnnopt.report.rerun_spread).
    readings = paired[["reference_readings_a", "reference_readings_b"]].max(axis=1)
    paired["reference_split"] = (readings > 1).astype("boolean").where(readings.notna(), pd.NA)
    changes = []
    for _, row in paired.iterrows():
        before, after = _speedup_interval(row, "a"), _speedup_interval(row, "b")
        found = (
            None if before is None or after is None else change_interval(before, after, confidence)
        )
        if found is None:
            changes.append((math.nan, math.nan, math.nan, NONE))
        else:
            category = SPEEDUP_CHANGE[classify(found, threshold)]
            changes.append((found.median, found.low, found.high, category))
    change = pd.DataFrame(
        changes,
        columns=["change_ratio", "change_low", "change_high", "speedup_change"],
        index=paired.index,
    )
    paired = pd.concat([paired, change], axis=1)
    # The plain rerun test beside the threshold rule: does B/A's interval hold 1.00x, i.e. no
    # change detected at this confidence (NA without an interval)? A rerun of three processes
    # a side reads "inconclusive" by the threshold rule (its interval is wider than +-5%)
    # whether or not the runs differ; this says which of those do.
    holds = (paired["change_low"] <= 1) & (paired["change_high"] >= 1)
    paired["holds_one"] = holds.astype("boolean").where(paired["change_low"].notna(), pd.NA)
    # Does the rerun land where A said it would: B's speedup inside A's interval (NA without
    # one on either side)?
    low, high, speedup = (paired[c].astype(float) for c in ("low_a", "high_a", "speedup_b"))
    inside = (low <= speedup) & (speedup <= high)
    known = low.notna() & speedup.notna()
    paired["inside"] = inside.astype("boolean").where(known, pd.NA)
    return paired


def compare(
    a: str | os.PathLike,
    b: str | os.PathLike,
    run: str | None = None,
    threshold: float = THRESHOLD,
    confidence: float = CONFIDENCE,
    spread: dict | None = None,
) -> Comparison:
    """B against A (result sets as run_folder takes them); `spread` as table.run_data takes it
    (both runs of one host share it)."""
    metrics_a, metrics_b = load_run(a, run), load_run(b, run)
    times, only_a, only_b = _sides(metrics_a, metrics_b, "profile", "process_time")
    peaks, _, _ = _sides(metrics_a, metrics_b, "memory", PEAK)
    verdicts = verdict_rows(
        *(
            table.comparison_numbers(
                side, threshold=threshold, confidence=confidence, spread=spread
            )
            for side in (metrics_a, metrics_b)
        ),
        threshold,
        confidence,
    )
    return Comparison(
        time_rows(times, threshold, confidence),
        memory_rows(peaks, threshold),
        verdicts,
        only_a,
        only_b,
    )


def summary(comparison: Comparison) -> str:
    """One line: how many rows changed, and how."""
    changes = comparison.profile["change"].value_counts()
    parts = [
        f"{changes.get(SLOWER_B, 0)} of {len(comparison.profile)} profile rows significantly "
        f"slower",
        f"{changes.get(FASTER_B, 0)} faster",
        f"{changes.get(NO_CHANGE, 0)} no significant change",
        f"{changes.get(INCONCLUSIVE, 0)} inconclusive",
    ]
    if changes.get(ONE_PROCESS, 0):
        parts.append(f"{changes[ONE_PROCESS]} with one process (no interval)")
    memory = comparison.memory
    moved = int((memory["change"] != SAME_PEAK).sum())
    text = f"B vs A: {', '.join(parts)}; {moved} memory changes"
    if moved:
        text += f" ({int(memory['regression'].sum())} regressions)"
    # A speedup that two rows share (in-place's, which the GC row shows too) counts once.
    distinct = comparison.verdicts.drop_duplicates(["compared", "shape", "speedup_a", "speedup_b"])
    inside = distinct["inside"].dropna()
    if len(inside):
        text += f"; {int(inside.sum())} of {len(inside)} speedups of B inside A's interval"
    moved = distinct["speedup_change"].value_counts()
    tested = int(sum(moved.get(c, 0) for c in SPEEDUP_CHANGE.values()))
    if tested:
        text += (
            f"; speedups B/A: {moved.get('larger', 0)} larger, {moved.get('smaller', 0)} "
            f"smaller, {moved.get(NO_CHANGE, 0)} no significant change, "
            f"{moved.get(INCONCLUSIVE, 0)} inconclusive of {tested}"
        )
        holds = distinct["holds_one"].dropna()
        text += f" ({int(holds.sum())} of {len(holds)} hold 1.00x: no change detected)"
    changed = comparison.verdicts[comparison.verdicts["changed"]]
    text += f"; {len(changed)} verdicts changed"
    split = int(changed["reference_split"].fillna(False).sum())
    if split:
        text += f" ({split} of them read both ways by this host's reference runs)"
    if comparison.only_a or comparison.only_b:
        text += f"; profile rows in A only {comparison.only_a}, in B only {comparison.only_b}"
    return text


def numbers(comparison: Comparison) -> pd.DataFrame:
    """The profile and memory rows in one table, `metric` time (a, b: ms, the geometric mean
    of process times) or peak_mib (a, b: MiB)."""
    return pd.concat(
        [
            comparison.profile.assign(metric=TIME),
            comparison.memory.assign(metric=PEAK),
        ],
        ignore_index=True,
    )[["metric", *KEY, *NUMBERS]]


def _ratio_text(row) -> str:
    if pd.isna(row["low"]) or row["low"] == row["high"]:
        return f"{row['ratio']:.3f}"
    return f"{row['ratio']:.3f} ({row['low']:.3f}-{row['high']:.3f})"


def _speedup_text(speedup, low, high) -> str:
    if pd.isna(speedup):
        return NONE
    return f"{speedup:.2f}x" + ("" if pd.isna(low) else f" ({low:.2f}-{high:.2f})")


def _rows_table(rows: pd.DataFrame, unit: str) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "variant": [label(row) for _, row in rows.iterrows()],
            "phase": rows["phase"],
            "shape": [shape_text(row) for _, row in rows.iterrows()],
            "threads": rows["threads"],
            f"A {unit}": rows["a"].map("{:.4g}".format),
            f"B {unit}": rows["b"].map("{:.4g}".format),
            "B/A": [_ratio_text(row) for _, row in rows.iterrows()],
            "processes A/B": [
                f"{a}/{b}" for a, b in zip(rows["processes_a"], rows["processes_b"], strict=True)
            ],
            "change": rows["change"],
        }
    )


def _verdict_tables(verdicts: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(every paired row's speedups and categories, the changed ones' verdicts)."""
    speedups = verdicts[list(MATCH)].copy()
    for side in ("a", "b"):
        numbers = verdicts[[f"speedup_{side}", f"low_{side}", f"high_{side}"]].values
        speedups[f"speedup {side.upper()}"] = [_speedup_text(*values) for values in numbers]
    speedups["B inside A's interval"] = verdicts["inside"].map({True: "yes", False: "**no**"})
    speedups["B inside A's interval"] = speedups["B inside A's interval"].fillna("-")
    change = verdicts[["change_ratio", "change_low", "change_high"]].values
    speedups["speedup B/A"] = [_speedup_text(*values) for values in change]
    speedups["change"] = verdicts["speedup_change"]
    for side in ("a", "b"):
        speedups[f"category {side.upper()}"] = verdicts[f"category_{side}"]
    changed = verdicts[verdicts["changed"]].rename(
        columns={"verdict_a": "verdict A", "verdict_b": "verdict B"}
    )
    changed["reference runs"] = [_reference_text(row) for _, row in changed.iterrows()]
    return speedups, changed[[*MATCH, "verdict A", "verdict B", "reference runs"]]


def _reference_text(row) -> str:
    """How many of the host's reference runs read the speedup as A does and as B does."""
    if pd.isna(row["reference_runs_a"]) or pd.isna(row["reference_runs_b"]):
        return NONE
    return (
        f"{row['reference_agree_a']} of {row['reference_runs_a']} read it as A, "
        f"{row['reference_agree_b']} as B"
    )


def markdown(comparison: Comparison, a: str, b: str, threshold: float, confidence: float) -> str:
    """The summary line, the rule, then the profile, memory and comparison-table tables."""
    speedups, changed = _verdict_tables(comparison.verdicts)
    lower, upper = f"{1 / (1 + threshold):.3f}", f"{1 + threshold:.3f}"
    sections = [
        ("Profile: time B/A", _rows_table(comparison.profile, "ms")),
        ("Memory: peak B/A", _rows_table(comparison.memory, "MiB")),
        ("Comparison table: speedups", speedups),
        ("Verdicts changed", changed),
    ]
    lines = [
        summary(comparison),
        "",
        f"A: {a}; B: {b}. A time ratio B/A is the ratio of the geometric means of the process "
        "times (each the 2nd percentile of its calls), with its "
        f"{confidence:.0%} Welch interval over processes: B is slower when the "
        f"whole interval lies above {upper}, faster when below {lower}, no significant change "
        f"when inside {lower}-{upper} (threshold {threshold:.0%}), inconclusive otherwise. "
        "Memory peaks are deterministic: their ratio is exact. A speedup's change B/A (where "
        "each run's speedup rests on one pair of jobs) has the Welch interval of the "
        "difference of the two log speedups, and is larger, smaller or no significant change "
        "by the same threshold: the test of a rerun that allows for B's own error, which "
        "'B inside A's interval' does not.",
        "",
    ]
    for title, frame in sections:
        text = frame.to_markdown(index=False) if len(frame) else "(none)"
        lines += [f"## {title}", "", text, ""]
    return "\n".join(lines)
