"""The tidy metrics table reshaped the way tables and figures read it: one row per record."""

from __future__ import annotations

import numpy as np
import pandas as pd

from rnnopt.report.aggregate import RECORD_COLUMNS, SHAPE_KEYS

# Metrics the tables and figures read: always present as columns (NaN where not measured).
USED_METRICS = (
    "time_ms.median",
    "time_ms.q2",
    "time_ms.iqr",
    "time_ms.min",
    "time_ms.n",
    "tokens_per_s",
    "flops",
    "gflops",
    "peak_fraction",
    "compile_s",
    "noisy",
    "peak_mib",
    "kept_mib",
    "minimum_mib",
    "peak_over_minimum",
    "heap.library_buffers_mib",
    "tracemalloc.numpy_blocks_per_step",
    "final_loss",
    "baseline_loss",
    "heldout_loss",
    "heldout_baseline_loss",
    "heldout_loss_ratio",
    "steps_completed",
    "time_per_step_ms",
    "time_per_step_q10_ms",
    "clip_fraction",
    "passed",
    "tolerance",
    "cuda_kernel_launches",
    "cudnn_persistent",
)
NONE = "-"  # a table cell with nothing measured
# What a profile process contributes to a speedup: the 2nd percentile of its calls
# (rnnopt.report.aggregate.fast_time; docs/intervals.md says why not the median, nor the 10th).
PROCESS_TIME = "time_ms.q2"
DTYPE_SHORT = {
    "float64": "f64",
    "float32": "f32",
    "tfloat32": "tf32",
    "bfloat16": "bf16",
    "float16": "f16",
}


# Rates and times combine over processes as geometric means (a ratio of two of them is then the
# ratio intervals.ratio_interval estimates); every other metric as the median.
GEOMETRIC_METRICS = (
    "time_ms.median",
    "time_ms.q2",
    "gflops",
    "tokens_per_s",
    "peak_fraction",
    "time_per_step_ms",
    "time_per_step_q10_ms",
)
# What tells one timed configuration (a job) from another: every descriptive column but the
# process and what may differ between its processes.
PER_PROCESS = ("process", "status", "reason", "source")


# A process whose speed probe (rnnopt.measure.contention) ran this much slower than the run's
# usual probe timed during a slow spell of the host: left out while two processes remain.
# (rnnopt.measure.spells.SLOW_PROBE, the spell a profile process waits out, is the same factor.)
DISTURBED_PROBE = 1.25
# ...or whose one probe did, the spell beginning or ending during its timing loop, and whose
# time is this much above the median of its job's other processes (docs/intervals.md).
DISTURBED_TIME = 1.10
PROBE_COLUMNS = ("contention.probe_before_ms", "contention.probe_after_ms")


def _others_median(values: pd.Series, groups: pd.Series) -> pd.Series:
    """Per row, the median of the other rows' values in its group (NaN alone in it)."""
    others = pd.Series(np.nan, index=values.index)
    for rows in values.groupby(groups).groups.values():
        group = values.loc[rows]
        for row in rows:
            others[row] = group.drop(row).median()
    return others


def disturbed(frame: pd.DataFrame, job: pd.Series) -> pd.Series:
    """Per ok profile row (one process) of a job (`job`: its key per row), whether a slow spell
    hit it: both probes, before and after its timing loop, above DISTURBED_PROBE x the median
    (over the run's ok rows) of the faster probe (a spell over the whole loop; a momentary
    hiccup slows one probe only); or one probe so, and the process's time above DISTURBED_TIME
    x the median of its job's other processes, those a spell took whole left out while any
    remain (a spell that began or ended during the loop;
    the time alone is no evidence, so a process no probe flags is never left out). False
    where the records have no probe (older runs)."""
    if not set(PROBE_COLUMNS) <= set(frame.columns) or frame.empty:
        return pd.Series(False, index=frame.index)
    ok = frame["status"] == "ok"
    probes = frame[list(PROBE_COLUMNS)]
    usual = probes.min(axis=1).where(ok).groupby(frame["run"]).transform("median")
    high = probes.gt(DISTURBED_PROBE * usual, axis=0)
    spell = high.all(axis=1)
    times = process_time(frame).where(ok)
    # The others a time is judged against leave out the processes a spell took whole, while
    # any remain: in a spell-heavy run they were half of a job's processes, and their median
    # hid a process 41% slower than the job's clean ones (run S).
    clean = ok & ~spell
    judged = _others_median(times[clean], job[clean]).reindex(frame.index)
    # Alone outside the spell (or in it): against all its job's other processes.
    alone = ok & job.isin(job[ok & judged.isna()])
    judged = judged.fillna(_others_median(times[alone], job[alone]).reindex(frame.index))
    slow = times > DISTURBED_TIME * judged
    return (ok & (spell | (high.any(axis=1) & slow))).fillna(False)


def _jobs(frame: pd.DataFrame) -> pd.Series:
    """Each row's job (profile or train records): its descriptive columns but the
    per-process ones, as text."""
    keys = [c for c in RECORD_COLUMNS if c not in PER_PROCESS]
    return pd.Series(
        ["|".join(map(str, row)) for row in frame[keys].itertuples(index=False)], frame.index
    )


def _by_job(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows with their job (_jobs) as column `_job`, each job's processes in order."""
    return frame.assign(_job=_jobs(frame)).sort_values(["_job", "process"], kind="stable")


def clean(frame: pd.DataFrame) -> pd.DataFrame:
    """The profile rows (one per process) that no slow spell disturbed: without every
    disturbed process, also those that undisturbed keeps to leave a job two (what the top-up
    counts to give processes back)."""
    return frame if frame.empty else frame[~disturbed(frame, _jobs(frame))]


def undisturbed(frame: pd.DataFrame) -> pd.DataFrame:
    """The profile rows (one per process) without the disturbed processes of each job, unless
    that would leave a job fewer than two ok processes; `disturbed` counts what was left out,
    `spell_kept` the disturbed processes kept to leave the job two (its time is then biased
    up, and a verdict that the bias could have made is not decided: verdicts.speed)."""
    if frame.empty:
        return frame.assign(disturbed=pd.Series(dtype=int), spell_kept=pd.Series(dtype=int))
    job = _jobs(frame)
    slow = disturbed(frame, job)
    kept_ok = ((frame["status"] == "ok") & ~slow).groupby(job).transform("sum")
    drop = slow & (kept_ok >= 2)
    left_out = drop.groupby(job).transform("sum")
    kept = (slow & ~drop).groupby(job).transform("sum")
    return frame[~drop].assign(
        disturbed=left_out[~drop].astype(int), spell_kept=kept[~drop].astype(int)
    )


def collapse_processes(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per job from the rows of its processes (profile records of one configuration
    timed in R processes): the ok processes' metrics combined (GEOMETRIC_METRICS as geometric
    means, others as medians), `processes` (how many were ok), `process_medians` (their
    time_ms.median, in process order) and `process_times` (their PROCESS_TIME: what speedup
    intervals rest on), leaving out disturbed processes (undisturbed). A job with no ok
    process keeps its first process's row, status and reason."""
    frame = undisturbed(frame)
    if frame.empty:
        empty = pd.Series(dtype=object)
        return frame.assign(
            processes=pd.Series(dtype=int), process_medians=empty, process_times=empty
        )
    frame = _by_job(frame)
    ok = frame[frame["status"] == "ok"]
    metrics = [
        c
        for c in frame.columns
        if c not in (*RECORD_COLUMNS, "source", "_job", "disturbed", "spell_kept")
    ]
    numeric = [c for c in metrics if pd.api.types.is_numeric_dtype(frame[c])]
    combined = ok.groupby("_job")[numeric].median()
    geometric = [c for c in GEOMETRIC_METRICS if c in numeric]
    logs = np.log(ok[geometric].where(ok[geometric] > 0))
    combined[geometric] = np.exp(logs.groupby(ok["_job"]).mean())
    combined["processes"] = ok.groupby("_job").size()
    combined["process_medians"] = ok.groupby("_job")["time_ms.median"].agg(tuple)
    combined["process_times"] = process_time(ok).groupby(ok["_job"]).agg(tuple)
    first_ok = ok.drop_duplicates("_job").set_index("_job")
    without_ok = frame[~frame["_job"].isin(ok["_job"])].drop_duplicates("_job").set_index("_job")
    described = first_ok[[c for c in frame.columns if c not in numeric and c != "_job"]]
    rows = described.join(combined)
    failed = without_ok.assign(
        processes=0, process_medians=[()] * len(without_ok), process_times=[()] * len(without_ok)
    )
    result = pd.concat([rows, failed]) if len(failed) else rows
    return result.sort_values("source", kind="stable").reset_index(drop=True)[
        [*frame.columns.drop("_job"), "processes", "process_medians", "process_times"]
    ]


def process_time(rows: pd.DataFrame) -> pd.Series:
    """Each profile process's time as speedups use it: PROCESS_TIME, the median of its calls
    where a record kept no calls (older runs)."""
    fast = rows[PROCESS_TIME] if PROCESS_TIME in rows else pd.Series(np.nan, index=rows.index)
    return fast.fillna(rows["time_ms.median"])


def records(metrics: pd.DataFrame, kind: str, per_process: bool = False) -> pd.DataFrame:
    """Records of `kind`: the descriptive columns plus one column per metric (NaN if absent).
    Profile records come one row per job (collapse_processes) unless `per_process`.

    Text columns hold str or None (not pandas' NA), so that row-wise code can test them.
    """
    rows = metrics[metrics["kind"] == kind]
    described = rows.drop_duplicates("source")[[*RECORD_COLUMNS, "source"]].copy()
    for column in described.columns:
        if pd.api.types.is_string_dtype(described[column]):
            text = described[column].astype(object)
            described[column] = text.where(text.notna(), None)
    measured = rows.dropna(subset=["metric"])
    values = measured.pivot(index="source", columns="metric", values="value")
    values.columns.name = None
    missing = [m for m in USED_METRICS if m not in values]
    values = values.reindex(columns=[*values.columns, *missing])
    frame = described.merge(values, left_on="source", right_index=True, how="left")
    frame = frame.reset_index(drop=True)
    if per_process:
        return frame
    collapse = {"profile": collapse_processes, "train": collapse_train_processes}.get(kind)
    return collapse(frame) if collapse else frame


# What a training process contributes to a speed comparison: its 10th-percentile step, as a
# profile process its 10th-percentile call.
TRAIN_PROCESS_TIME = "time_per_step_q10_ms"


def train_step_time(rows: pd.DataFrame) -> pd.Series:
    """Each training process's time per step as speed comparisons divide it:
    TRAIN_PROCESS_TIME, the median step where a record has no 10th percentile (older runs)."""
    return rows[TRAIN_PROCESS_TIME].fillna(rows["time_per_step_ms"])


def collapse_train_processes(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per training run from the rows of its processes (the batch-size runs train in
    train.experiments.repeats processes): the first process's row (its losses stand for all:
    every process takes the same steps from the same weights), with `processes` (how many
    ok processes timed their steps) and `process_times` (their train_step_time, in process
    order: what the training speedups' intervals rest on)."""
    frame = _by_job(frame)
    timed = frame[frame["status"] == "ok"]
    times = train_step_time(timed).dropna() if len(timed) else pd.Series(dtype=float)
    per_job = times.groupby(timed.loc[times.index, "_job"]).agg(tuple)
    first = frame.drop_duplicates("_job")
    process_times = [per_job.get(j, ()) for j in first["_job"]]
    return (
        first.assign(process_times=process_times, processes=[len(t) for t in process_times])
        .drop(columns="_job")
        .sort_values("source", kind="stable")
        .reset_index(drop=True)
    )


def label(row) -> str:
    """numpy-lstm-fused f32, torch-lstm-nn f16 cuda: how tables and legends name a variant."""
    text = f"{row['variant']} {DTYPE_SHORT.get(row['dtype'], row['dtype'])}"
    return text + (f" {row['device']}" if row["device"] not in ("cpu", None) else "")


def with_labels(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.copy()
    frame["label"] = [label(row) for _, row in frame.iterrows()] if len(frame) else []
    return frame


def shape_text(row) -> str:
    return "B{batch} T{seq_len} I{input_size} H{hidden_size}".format(
        **{key: row[key] for key in SHAPE_KEYS}
    )


# The anchor shapes of the default config, by name: (batch, seq_len, input_size, hidden_size).
NAMED_SHAPES = {(16, 20, 32, 64): "small", (64, 100, 512, 512): "fastrnns"}


def shape_label(row) -> str:
    """'small', 'fastrnns' or 'B4 T20 I32 H64': how verdicts name a shape."""
    key = tuple(int(row[k]) for k in SHAPE_KEYS)
    return NAMED_SHAPES.get(key) or shape_text(row)


def preferred(frame: pd.DataFrame, phase: str = "step") -> pd.DataFrame:
    """Rows at the preferred phase (if any) and at the smallest thread count: the anchor."""
    if frame.empty:
        return frame
    if (frame["phase"] == phase).any():
        frame = frame[frame["phase"] == phase]
    if frame["threads"].notna().any():
        frame = frame[frame["threads"] == frame["threads"].min()]
    return frame


def verification(metrics: pd.DataFrame) -> pd.DataFrame:
    """One row per verify record: run, variant, dtype, device, status, reason, passed, errors."""
    return records(metrics, "verify")


def failed_verification(metrics: pd.DataFrame) -> set[tuple[str, str, str, str]]:
    """(run, variant, dtype, device) whose verification ran and failed (or broke)."""
    verify = verification(metrics)
    if verify.empty:
        return set()
    passed = verify["passed"] if "passed" in verify else pd.Series(float("nan"), verify.index)
    bad = verify[(verify["status"] == "failed") | ((verify["status"] == "ok") & (passed != 1))]
    return {tuple(row) for row in bad[["run", "variant", "dtype", "device"]].itertuples(False)}


def runs(metrics: pd.DataFrame, placeholder: bool = False) -> list[str]:
    """The runs in `metrics`, sorted; with `placeholder`, [NONE] where there is none, for
    tables that keep a row saying so."""
    found = sorted(metrics["run"].dropna().unique())
    return found or ([NONE] if placeholder else [])
