"""What one comparison measured in one run: speedup with an interval, memory, loss change.

Speed pairs profile records of the two sides at the same cell, shape, phase and threads (and
dtype/device/variant where both sides fix them alike), at the anchor (step phase, fewest
threads). Each side of a pair is timed in several processes; per pair the speedup is the ratio of
the geometric means of the baseline's and the candidate's process medians, with the Welch
interval over processes of rnnopt.report.intervals. Several pairs at one shape (or over shapes)
show their geometric mean and the union of their intervals.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from rnnopt.report.aggregate import SHAPE_KEYS
from rnnopt.report.comparisons import Comparison, Side
from rnnopt.report.intervals import (
    CONFIDENCE,
    Interval,
    ratio_interval,
)
from rnnopt.report.wide import label, preferred, shape_label

MATCH_KEYS = ("cell", "task", "phase", *SHAPE_KEYS, "threads")
# What names one profile job (its processes apart): the key `rnnopt topup` adds processes to.
JOB_KEYS = ("variant", "dtype", "device", *SHAPE_KEYS, "threads")
PEAK_METRIC = "peak_mib"
ALLOC_METRIC = "tracemalloc.numpy_blocks_per_step"


@dataclass
class Outcome:
    """One comparison in one run. Texts are what the table shows; numbers feed the verdict."""

    speedup: Interval | None = None
    memory_ratio: float | None = None
    allocations: tuple[float, float] | None = None  # (candidate, baseline) per step
    gc_share: tuple[float, float] | None = None  # (candidate, baseline) fraction of time
    loss_change: float | None = None  # relative change of the final (held-out) loss
    heldout_ratios: dict[str, float] = field(default_factory=dict)  # run -> held-out / baseline
    loss_text: str | None = None
    stability: tuple[bool, str] | None = None
    throughput: Interval | None = None  # tokens/s of the best batch / of the smallest
    speed_text: str | None = None
    notes: list[str] = field(default_factory=list)
    # "pair" comparisons measured at several shapes: one Outcome per shape label (speed,
    # memory, allocations, GC of that shape; the loss is the row's), judged one by one.
    by_shape: dict[str, Outcome] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)  # why something is not measured
    unverified: list[str] = field(default_factory=list)  # variants that failed verification
    # The profile jobs of both sides that the speedup rests on (JOB_KEYS values each).
    jobs: tuple[tuple, ...] = ()


@dataclass
class RunData:
    """The wide frames of one run."""

    profile: pd.DataFrame
    memory: pd.DataFrame
    train: pd.DataFrame
    failed_verification: set
    confidence: float = CONFIDENCE  # of the speedup intervals
    # This host's between-run spread of each pair's log speedup, where measured
    # (rnnopt.report.rerun_spread): pair_key -> PairSpread.
    spread: dict = field(default_factory=dict)


def _ok(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["status"] == "ok"]


def pairs(
    frame: pd.DataFrame, candidate: Side, baseline: Side, extra_keys: tuple[str, ...] = ()
) -> pd.DataFrame:
    """Candidate and baseline records side by side (suffixes _c, _b) at equal match keys."""
    keys = [*MATCH_KEYS, *(k for k in extra_keys if k in frame)]
    for name in ("variant", "dtype", "device", "setting"):
        if getattr(candidate, name) == getattr(baseline, name):
            keys.append(name)
    ok = _ok(frame)
    c, b = ok[candidate.mask(ok)], ok[baseline.mask(ok)]
    if c.empty or b.empty:
        return pd.DataFrame()
    return c.merge(b, on=keys, suffixes=("_c", "_b"))


def _col(frame: pd.DataFrame, name: str) -> pd.Series:
    return frame[name] if name in frame else pd.Series(np.nan, index=frame.index)


def job_text(values) -> str:
    """One profile job (JOB_KEYS values) as text: `numpy-lstm-naive float64 cpu
    b16-t20-i32-h64 threads1`."""
    variant, dtype, device, batch, seq_len, input_size, hidden_size, threads = values
    shape = f"b{int(batch)}-t{int(seq_len)}-i{int(input_size)}-h{int(hidden_size)}"
    return f"{variant} {dtype} {device} {shape} threads{int(threads)}"


def side_jobs(matched: pd.DataFrame, suffix: str) -> list[tuple]:
    """The JOB_KEYS values of one side (suffix _c or _b) of each matched pair: the side's own
    column where the sides differ, the shared one where pairs() matched on it."""
    columns = [f"{key}{suffix}" if f"{key}{suffix}" in matched else key for key in JOB_KEYS]
    return [tuple(row) for row in matched[columns].itertuples(index=False)]


def pair_keys(matched: pd.DataFrame) -> list[tuple[str, str]]:
    """(candidate job, baseline job) of each matched pair, as job_text: what a between-run
    spread is measured and looked up by. A pair at a phase other than the step (the
    persistent section's forward) names it after each job: `... threads2 forward`."""
    sides = ([job_text(job) for job in side_jobs(matched, s)] for s in ("_c", "_b"))
    keys = list(zip(*sides, strict=True))
    if "phase" not in matched:
        return keys
    return [
        keys_at if phase == "step" else (f"{keys_at[0]} {phase}", f"{keys_at[1]} {phase}")
        for keys_at, phase in zip(keys, matched["phase"], strict=True)
    ]


def pair_intervals(
    matched: pd.DataFrame, confidence: float = CONFIDENCE, spread: dict | None = None
) -> pd.DataFrame:
    """Per pair: ratio = baseline time / candidate time (geometric means of the processes'
    times, rnnopt.report.wide.PROCESS_TIME), its interval low-high over processes (NaN with
    one process a side), widened by the pair's between-run spread where `spread` (pair_keys
    -> rerun_spread.PairSpread) has it, `processes`, the fewer processes of the two sides, the
    interval's se_log and welch_df (rnnopt.report.intervals), run_sd_log, run_df and the
    processes' own process_df (0, NaN and NaN without a spread), and the speedup pooled over
    the host's reference runs where the spread holds it (intervals.with_reference):
    ref_ratio, ref_low, ref_high, ref_runs and agrees (this run with them; NA: no check)."""
    rows, references = [], []
    keys = pair_keys(matched) if spread else [None] * len(matched)
    times = zip(matched["process_times_b"], matched["process_times_c"], keys, strict=True)
    for base, cand, key in times:
        interval = ratio_interval(base, cand, confidence)
        if interval is None:
            rows.append((math.nan,) * 3 + (0,) + (math.nan,) * 2 + (0.0,) + (math.nan,) * 2)
            references.append((math.nan,) * 3 + (0, None))
            continue
        if key in (spread or {}):
            interval = spread[key].applied(interval, confidence)
        references.append(_reference_row(interval))
        low = interval.low if interval.has_interval else math.nan
        high = interval.high if interval.has_interval else math.nan
        se = math.nan if interval.se is None else interval.se
        df = math.nan if interval.df is None else interval.df
        run_df = math.nan if interval.run_df is None else interval.run_df
        own_df = math.nan if interval.process_df is None else interval.process_df
        spread_of_run = (interval.run_sd, run_df, own_df)
        rows.append((interval.median, low, high, interval.n, se, df, *spread_of_run))
    columns = ["ratio", "low", "high", "processes", "se_log", "welch_df"]
    columns += ["run_sd_log", "run_df", "process_df"]
    floats = {column: float for column in columns if column != "processes"}
    found = pd.DataFrame(rows, columns=columns, index=matched.index).astype(floats)
    # Processes of each side that a slow spell slowed and that stayed in (wide.undisturbed).
    for side, suffix in (("spell_b", "_b"), ("spell_c", "_c")):
        found[side] = _col(matched, f"spell_kept{suffix}").fillna(0).astype(int)
    reference = pd.DataFrame(references, columns=REFERENCE_COLUMNS, index=matched.index)
    reference = reference.astype({"ref_ratio": float, "ref_low": float, "ref_high": float})
    return pd.concat([found, reference.astype({"agrees": "boolean"})], axis=1)


REFERENCE_COLUMNS = ["ref_ratio", "ref_low", "ref_high", "ref_runs", "agrees"]


def _reference_row(interval: Interval) -> tuple:
    r = interval.reference
    if r is None:
        return (math.nan,) * 3 + (0, None)
    return (r.median, r.low, r.high, interval.reference_runs, interval.agrees)


def _pooled_reference(good: pd.DataFrame, sides: tuple[int, int]) -> dict:
    """Interval's reference fields for pairs that all have a reference: the union of their
    pooled intervals (one pair: its own) and whether this run agrees with every one."""
    if good["ref_runs"].min() < 2 or good["agrees"].isna().any():
        return {}
    pooled = Interval(
        float(np.exp(np.log(good["ref_ratio"]).mean())),
        float(good["ref_low"].min()),
        float(good["ref_high"].max()),
        sides,
    )
    agrees = bool(good["agrees"].all())
    return {"reference": pooled, "reference_runs": int(good["ref_runs"].min()), "agrees": agrees}


def speedup(
    matched: pd.DataFrame, confidence: float = CONFIDENCE, spread: dict | None = None
) -> Interval | None:
    """The pairs' geometric-mean speedup and the union of their intervals (none when a pair
    has no interval: one process)."""
    if matched.empty or "process_times_c" not in matched:
        return None
    intervals = pair_intervals(matched, confidence, spread)
    good = intervals[np.isfinite(intervals["ratio"]) & (intervals["ratio"] > 0)]
    if good.empty:
        return None
    estimate = float(np.exp(np.log(good["ratio"]).mean()))
    processes = int(good["processes"].min())
    sides = (processes, processes)
    if good["low"].isna().any():
        return Interval(estimate, processes=sides)
    low, high = float(good["low"].min()), float(good["high"].max())
    run_sd = float(good["run_sd_log"].max())
    slowed = (int(good["spell_b"].sum()), int(good["spell_c"].sum()))
    if len(good) == 1 and good["se_log"].notna().all():  # one pair: its Welch interval
        se, df = float(good["se_log"].iloc[0]), float(good["welch_df"].iloc[0])
        run_df = float(good["run_df"].iloc[0]) if run_sd > 0 else None
        own_df = float(good["process_df"].iloc[0]) if run_sd > 0 else None
        found = Interval(estimate, low, high, sides, se, df, run_sd, run_df, slowed, own_df)
    else:
        found = Interval(estimate, low, high, sides, run_sd=run_sd, spell_slowed=slowed)
    return replace(found, **_pooled_reference(good, sides))


def ratio(matched: pd.DataFrame, metric: str) -> float | None:
    """Geometric mean of candidate / baseline of `metric` over the pairs (None if unknown)."""
    if matched.empty or f"{metric}_c" not in matched or f"{metric}_b" not in matched:
        return None
    values = (matched[f"{metric}_c"] / matched[f"{metric}_b"]).to_numpy(float)
    values = values[np.isfinite(values) & (values > 0)]
    return float(np.exp(np.mean(np.log(values)))) if len(values) else None


def relative_change(candidate: pd.Series, baseline: pd.Series) -> float | None:
    values = ((candidate - baseline) / baseline.abs()).to_numpy(float)
    values = values[np.isfinite(values)]
    return float(np.median(values)) if len(values) else None


def missing_reason(frame: pd.DataFrame, side: Side, kind: str) -> str:
    """Why `side` has no usable `kind` records in this run: their status, or none exist."""
    rows = frame[side.mask(frame)] if not frame.empty else frame
    bad = rows[rows["status"] != "ok"] if not rows.empty else rows
    if not bad.empty:
        first = bad.iloc[0]
        reason = f"{first['status']}: {first['reason']}"
        return reason if str(first["variant"]) in reason else f"{label(first)} {reason}"
    if rows.empty:
        return f"no {kind} records of {side}"
    return ""


def _not_measured_at(frame: pd.DataFrame, sides, measured: list[tuple]) -> list[str]:
    """'fastrnns: skipped: <why>' for each shape that a side's step records reached only
    as failed or skipped: a shape the row leaves out, said in the row."""
    if frame.empty:
        return []
    notes = {}
    steps = frame[(frame["phase"] == "step") & (frame["status"] != "ok")]
    for side in sides:
        for _, row in steps[side.mask(steps)].iterrows():
            shape = tuple(int(row[k]) for k in SHAPE_KEYS)
            if shape not in measured:
                reason = str(row["reason"]) if pd.notna(row["reason"]) else ""
                why = re.sub(r"^\w+(Error|Exception): ", "", reason).split(":")[0]
                notes.setdefault(shape_label(row), f"{row['status']}: {why}".rstrip(": "))
    return [f"not at {where}: {why}" for where, why in notes.items()]


def _unverified(data: RunData, matched: pd.DataFrame, run: str) -> list[str]:
    names = set()
    for suffix in ("_c", "_b"):
        for _, row in matched.iterrows():
            key = tuple(row.get(f"{n}{suffix}", row.get(n)) for n in ("variant", "dtype", "device"))
            if (run, *key) in data.failed_verification:
                names.add(" ".join(str(k) for k in key))
    return sorted(names)


def _jobs(timed: pd.DataFrame) -> tuple[tuple, ...]:
    """The profile jobs of both sides of matched pairs, candidates first, each once."""
    return tuple(dict.fromkeys(side_jobs(timed, "_c") + side_jobs(timed, "_b")))


def _measured(
    comparison: Comparison, timed: pd.DataFrame, held: pd.DataFrame, data: RunData
) -> Outcome:
    """Speed, GC share, memory ratio and allocations of matched profile / memory pairs."""
    outcome = Outcome(
        speedup=speedup(timed, data.confidence, data.spread),
        memory_ratio=ratio(held, PEAK_METRIC),
    )
    if not timed.empty:
        outcome.jobs = _jobs(timed)
    if "gc" in comparison.criteria and not timed.empty:
        shares = [
            (_col(timed, f"gc.pause_ms{s}") / _col(timed, f"time_ms.n{s}"))
            / timed[f"time_ms.median{s}"]
            for s in ("_c", "_b")
        ]
        if all(share.notna().any() for share in shares):
            outcome.gc_share = (float(shares[0].mean()), float(shares[1].mean()))
    if "allocations" in comparison.criteria and not held.empty and f"{ALLOC_METRIC}_c" in held:
        outcome.allocations = (
            float(held[f"{ALLOC_METRIC}_c"].mean()),
            float(held[f"{ALLOC_METRIC}_b"].mean()),
        )
    return outcome


def _shapes(*frames: pd.DataFrame) -> list[tuple]:
    """The shapes present in any frame, smallest first."""
    found = {
        tuple(int(v) for v in row)
        for f in frames
        if not f.empty
        for row in f[list(SHAPE_KEYS)].to_numpy()
    }
    return sorted(found, key=lambda shape: (math.prod(shape), shape))


def _at(frame: pd.DataFrame, shape: tuple) -> pd.DataFrame:
    if frame.empty:
        return frame
    return frame[(frame[list(SHAPE_KEYS)].astype(int) == list(shape)).all(axis=1)]


def measure_pair(comparison: Comparison, data: RunData, run: str) -> Outcome:
    cand, base = comparison.candidate, comparison.baseline
    timed = preferred(pairs(data.profile, cand, base))
    # Memory ratios divide figures of one instrument: both sides' peak_source must agree.
    held = preferred(pairs(data.memory, cand, base, extra_keys=("peak_source",)))
    outcome = _measured(comparison, timed, held, data)
    shapes = _shapes(timed, held)
    if len(shapes) > 1:
        outcome.by_shape = {
            shape_label(dict(zip(SHAPE_KEYS, shape, strict=True))): _measured(
                comparison, _at(timed, shape), _at(held, shape), data
            )
            for shape in shapes
        }
    if outcome.speedup is None:
        reasons = [missing_reason(data.profile, side, "profile") for side in (cand, base)]
        outcome.missing += list(dict.fromkeys(r for r in reasons if r)) or [
            f"no profile records of {cand} and {base} at a common shape"
        ]
    else:
        outcome.unverified = _unverified(data, timed, run)
        outcome.notes += _not_measured_at(data.profile, (cand, base), shapes)
        compile_s = _col(timed, "compile_s_c").dropna()
        if len(compile_s):
            outcome.notes.append(f"compile {compile_s.median():.0f} s")
    trained = pairs(data.train[data.train["setting"] == "base"], cand, base)
    if not trained.empty and "heldout_loss_c" in trained:
        same_steps = trained[trained["steps_completed_c"] == trained["steps_completed_b"]]
        outcome.loss_change = relative_change(
            same_steps["heldout_loss_c"], same_steps["heldout_loss_b"]
        )
    return outcome


def _loss(row) -> str:
    """'0.0123 (6% of baseline)': the final held-out loss, or the status of a failed run."""
    if row["status"] != "ok":
        return row["status"]
    if pd.isna(row.get("heldout_loss")):
        return "?"
    return f"{row['heldout_loss']:.3g} ({row['heldout_loss_ratio']:.0%} of baseline)"


def _learning(outcome: Outcome, rows) -> None:
    """Held-out loss / baseline of each compared run, for the `learned` criterion."""
    for row in rows:
        ratio = row.get("heldout_loss_ratio")
        outcome.heldout_ratios[str(row["setting"])] = float(ratio) if pd.notna(ratio) else math.nan


def _experiment(data: RunData, pattern: str) -> pd.DataFrame:
    train = data.train
    return train[train["setting"].fillna("").str.fullmatch(pattern)]


def _memory_at(data: RunData, row, batches: tuple[int, int]) -> float | None:
    """peak_mib at batch batches[0] / at batches[1]: same variant, dtype, device, other sizes."""
    memory = preferred(_ok(data.memory))
    same = (memory["variant"] == row["variant"]) & (memory["dtype"] == row["dtype"])
    memory = memory[same & (memory["device"] == row["device"])]
    first, second = (memory[memory["batch"] == b] for b in batches)
    matched = first.merge(
        second,
        on=["seq_len", "input_size", "hidden_size", "phase", "threads"],
        suffixes=("_c", "_b"),
    )
    return ratio(matched, PEAK_METRIC)


def measure_clipping(comparison: Comparison, data: RunData, run: str) -> Outcome:
    outcome = Outcome()
    runs = _experiment(data, "clip-o(n|ff)")
    off, on = (runs[runs["setting"] == s] for s in ("clip-off", "clip-on"))
    if off.empty or on.empty:
        outcome.missing.append("no clip-on / clip-off training records")
        return outcome
    off, on = off.iloc[0], on.iloc[0]
    outcome.loss_text = f"{_loss(off)} -> {_loss(on)}"
    _clipping_cost(outcome, off, on, data.confidence)
    if on["status"] != "ok":
        outcome.stability = (False, f"clip-on also {on['status']}: {on['reason']}")
    elif on.get("clip_fraction", 1.0) == 0:
        outcome.stability = (False, "the clipping threshold was never reached")
    elif not on.get("heldout_loss_ratio", math.nan) < 1:
        outcome.stability = (False, "clip-on did not beat the predict-the-mean baseline")
    elif off["status"] == "diverged":
        outcome.stability = (True, "clip-off diverged, clip-on learned (below the baseline)")
    elif on["heldout_loss"] < 0.9 * off["heldout_loss"]:
        outcome.stability = (True, "clip-on reached a lower held-out loss")
    else:
        outcome.stability = (False, "clip-off trained as well (raise the learning rate)")
    return outcome


def _clipping_cost(outcome: Outcome, off, on, confidence: float) -> None:
    """Step time without / with clipping, only when both runs took every step. A diverged
    run's few steps are the first of its process, still warming up (here 3.6 ms falling to
    2.7 over steps 3-12 unclipped, against 2.7 from step 2 clipped, in the same run): no
    match for the median of a whole run, nor for the same steps of another process."""
    stopped = off["steps_completed"]
    if pd.notna(stopped) and stopped != on["steps_completed"]:
        outcome.notes.append(f"no step time compared: clip-off stopped after {stopped:.0f} steps")
    else:
        outcome.speedup = step_ratio(off, on, confidence)


ACCUMULATION = re.compile(r"accum-(\d+)x(\d+)")


def step_ratio(baseline, candidate, confidence: float) -> Interval | None:
    """Time per step of the baseline run / of the candidate's, over their processes' step
    times (wide.collapse_train_processes: each its 10th-percentile step), with the Welch
    interval where both ran in two processes or more; None where one has no timed step."""
    return ratio_interval(baseline["process_times"], candidate["process_times"], confidence)


def _scaled(interval: Interval, factor: float) -> Interval:
    """The interval of factor x the ratio (a known constant: its log spread is the ratio's)."""
    ends = {"low": interval.low, "high": interval.high}
    ends = {k: v * factor for k, v in ends.items() if v is not None}
    return replace(interval, median=interval.median * factor, **ends)


def measure_accumulation(comparison: Comparison, data: RunData, run: str) -> Outcome:
    outcome = Outcome()
    runs = _ok(_experiment(data, ACCUMULATION.pattern))
    k = runs["setting"].str.extract(ACCUMULATION)[0].astype(float)
    one, many = runs[k == 1], runs[k > 1]
    if one.empty or many.empty:
        outcome.missing.append("no accumulation training records (ok)")
        return outcome
    one, many = one.iloc[0], many.iloc[0]
    micro, total = int(many["batch"]), int(one["batch"])
    outcome.speedup = step_ratio(one, many, data.confidence)
    outcome.loss_change = relative_change(
        pd.Series([many["heldout_loss"]]), pd.Series([one["heldout_loss"]])
    )
    outcome.loss_text = f"{_loss(one)} -> {_loss(many)}"
    _learning(outcome, (one, many))
    outcome.memory_ratio = _memory_at(data, many, (micro, total))
    if outcome.memory_ratio is None:
        outcome.missing.append(
            f"no memory records of {many['variant']} at batch {micro} and {total}"
        )
    outcome.notes.append(f"{many['setting']} vs {one['setting']}")
    return outcome


def measure_batch_size(comparison: Comparison, data: RunData, run: str) -> Outcome:
    """Tokens/s of the batch size with the most (over its processes) against the smallest:
    tokens per step is fixed by B and T, so the ratio is (B_best / B_smallest) x the step-time
    ratio, and carries that ratio's interval over processes."""
    outcome = Outcome()
    runs = _ok(_experiment(data, r"batch-\d+"))
    runs = runs[runs["process_times"].map(len) > 0]
    if runs["batch"].nunique() < 2:
        outcome.missing.append("fewer than two batch sizes trained")
        return outcome
    smallest = runs.loc[runs["batch"].idxmin()]
    gains = {
        index: _scaled(step_ratio(smallest, row, data.confidence), row["batch"] / smallest["batch"])
        for index, row in runs.iterrows()
    }
    best = runs.loc[max(gains, key=lambda index: gains[index].median)]
    gain = gains[best.name]
    outcome.throughput = outcome.speedup = gain
    outcome.speed_text = f"B={best['batch']}: {gain} tokens/s of B={smallest['batch']}"
    outcome.loss_change = relative_change(
        pd.Series([best["heldout_loss"]]), pd.Series([smallest["heldout_loss"]])
    )
    outcome.loss_text = f"{_loss(smallest)} -> {_loss(best)}"
    _learning(outcome, (smallest, best))
    outcome.memory_ratio = _memory_at(data, best, (int(best["batch"]), int(smallest["batch"])))
    return outcome


METHODS = {
    "pair": measure_pair,
    "clipping": measure_clipping,
    "accumulation": measure_accumulation,
    "batch_size": measure_batch_size,
}


def measure(comparison: Comparison, data: RunData, run: str) -> Outcome:
    return METHODS[comparison.method](comparison, data, run)
