"""How far one host's speedups move from run to run beyond what each run's processes show: the
between-run spread of each pair's log speedup, measured over earlier runs of that host.

The processes of one run agree better than runs do (docs/intervals.md, "Between runs"): a run
shares a state that no interval over its own processes can see. With K runs of one host, each
giving a pair's log speedup y_k with its within-run standard error s_k, the between-run
variance is estimated by DerSimonian and Laird's method of moments, each run weighted by
1 / s_k^2 (intervals.between_run_sd), on K - 1 degrees of freedom. The report adds tau^2 to
each later run's within-run variance of that pair (intervals.with_run_spread); the verdicts,
the top-up and `rnnopt compare` use the widened interval.

A run's pair that rests on a process a slow spell slowed (kept to leave its job two:
rnnopt.report.wide.undisturbed) is left out of the estimate.

Near the threshold no interval keeps a verdict from moving: a speedup whose runs centre about
one tau-widened half-width beyond it reads decided in some runs and inconclusive in others
(docs/intervals.md, "Verdicts near the threshold"). So the file also says how the K runs read
each pair by the verdict rule (intervals.classify, each run's interval widened by tau): the
report prints, beside a verdict that not every reference run reads the same, how many read what.

The K runs also measure the host's speedup itself, better than any one of them: the file holds
their random-effects pooled log speedup and its standard error (intervals.pooled_runs), which
a later run's verdict reads where that run agrees with them (intervals.with_reference;
docs/intervals.md, "Verdicts from the reference runs").

The weights-vs-cache sweeps' verdict is judged the same way: each sweep's ratio of its best
point beyond L3 to its best inside is a row too, keyed by the sweep (cache.sweep_key), without
readings (its verdict's bound is its own, not the threshold rule's).

The file (CSV) holds one row per run name and pair: run, candidate, baseline (the pair's jobs,
outcomes.job_text; a sweep's key), runs (K), run_sd_log (tau), within_se_log (the root mean s_k^2),
speedup_low / speedup_high (the K runs' smallest and largest speedup), mean_log / mean_se_log
(the pooled log speedup and its standard error), and reads_faster, reads_slower, reads_same,
reads_inconclusive (how many of the K runs read the pair so). A file written before the pooled
or the reads columns existed is read without them.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from rnnopt.errors import UserError
from rnnopt.report import intervals
from rnnopt.report.comparisons import COMPARISONS
from rnnopt.report.experiments import cache, persistent
from rnnopt.report.intervals import (
    CONFIDENCE,
    THRESHOLD,
    between_run_sd,
    log_interval,
    pooled_runs,
)
from rnnopt.report.outcomes import pair_intervals, pair_keys, pairs
from rnnopt.report.table import run_data
from rnnopt.report.wide import preferred

COLUMNS = (
    *("run", "candidate", "baseline", "runs", "run_sd_log", "within_se_log"),
    *("speedup_low", "speedup_high"),
)
POOLED = ("mean_log", "mean_se_log")  # optional when read: files before them lack them
# How many of the K runs read the pair faster / slower / no meaningful difference /
# inconclusive (intervals.classify): the columns, and the reading each counts.
READS = {
    "reads_faster": intervals.FASTER,
    "reads_slower": intervals.SLOWER,
    "reads_same": intervals.SAME,
    "reads_inconclusive": intervals.INCONCLUSIVE,
}


class PairSpread(NamedTuple):
    """One pair's between-run spread on one host, as the report uses it."""

    run_sd: float  # tau, of the log speedup
    run_df: float  # its degrees of freedom: runs - 1
    reads: dict[str, int]  # reading (intervals.classify) -> runs that read the pair so
    # The runs' pooled log speedup and its standard error (NaN in a file without them).
    mean_log: float = math.nan
    mean_se_log: float = math.nan

    def applied(self, interval: intervals.Interval, confidence: float = CONFIDENCE):
        """`interval` (one run's, over its processes) widened by this spread
        (intervals.with_run_spread), with the runs' pooled speedup and whether the run agrees
        with it (intervals.with_reference)."""
        widened = intervals.with_run_spread(interval, self.run_sd, self.run_df, confidence)
        runs = int(self.run_df) + 1
        return intervals.with_reference(widened, self.mean_log, self.mean_se_log, runs, confidence)


FEWEST_RUNS = 3  # two runs give one degree of freedom: too few to estimate a variance


def run_pairs(metrics: pd.DataFrame) -> pd.DataFrame:
    """Every timed pair that a verdict judges (judged_pairs) in one run's metrics, once each, and
    the weights-vs-cache sweeps' ratios (cache.sweep_ratios): run, candidate, baseline,
    log_ratio, se_log and welch_df (within the run: over its processes), processes (of the
    side with fewer), threshold_rule (whether the verdict rule reads it: not the sweeps')."""
    rows = {}
    for run, data in run_data(metrics).items():
        for matched in judged_pairs(data.profile):
            if matched.empty or "process_times_c" not in matched:
                continue
            intervals = pair_intervals(matched)
            for key, (_, found) in zip(pair_keys(matched), intervals.iterrows(), strict=True):
                # A pair that rests on a process a slow spell slowed measures the spell, which
                # the verdict rule already answers (Interval.spell_could_make), not the shift
                # a whole run shares: run AC's three TorchScript processes, all in spells, put
                # its spread at 20.6% where the other three runs gave 0.
                spelled = found["spell_b"] + found["spell_c"] > 0
                if found["ratio"] > 0 and np.isfinite(found["se_log"]) and not spelled:
                    within = (found["se_log"], found["welch_df"], found["processes"])
                    rows[(run, *key)] = (math.log(found["ratio"]), *within, True)
    for run, key, interval, spelled in cache.sweep_ratios(metrics):
        if interval.se is not None and interval.median > 0 and not spelled:
            within = (interval.se, interval.df, interval.n)
            rows[(run, *key)] = (math.log(interval.median), *within, False)
    columns = ["run", "candidate", "baseline", "log_ratio", "se_log", "welch_df", "processes"]
    columns.append("threshold_rule")
    frame = pd.DataFrame([(*key, *value) for key, value in rows.items()], columns=columns)
    # numbers even when empty (a run whose every pair a spell slowed): concatenated with the
    # other runs', an empty frame's object columns would make theirs objects too
    return frame.astype({"log_ratio": float, "se_log": float, "welch_df": float})


def judged_pairs(profile: pd.DataFrame):
    """The matched profile jobs of one run whose speedups a verdict judges: each pair
    comparison of the comparison table at its anchor, and the persistent section's rung
    against nn.LSTM at each thread count, forward and step (its targets)."""
    for comparison in COMPARISONS:
        if comparison.method == "pair":
            yield preferred(pairs(profile, comparison.candidate, comparison.baseline))
    matched = pairs(profile, persistent.PERSISTENT, persistent.LIBRARY)
    if not matched.empty:
        yield matched[matched["phase"].isin(persistent.PHASES)]


def readings(
    group: pd.DataFrame, run_sd: float, threshold: float, confidence: float
) -> dict[str, int]:
    """How many of a pair's runs (run_pairs rows) read it faster / slower / ... by the verdict
    rule, each run's interval widened by the spread estimated over them all: what each would
    have read with the spread the report now adds."""
    counts = dict.fromkeys(READS, 0)
    column = {reading: name for name, reading in READS.items()}
    for row in group.itertuples(index=False):
        sides = (int(row.processes),) * 2
        own = log_interval(math.exp(row.log_ratio), row.se_log, row.welch_df, sides, confidence)
        widened = intervals.with_run_spread(own, run_sd, len(group) - 1, confidence)
        counts[column[intervals.classify(widened, threshold)]] += 1
    return counts


def estimate(
    runs: list[pd.DataFrame], threshold: float = THRESHOLD, confidence: float = CONFIDENCE
) -> pd.DataFrame:
    """The between-run spread of every pair measured in at least FEWEST_RUNS of `runs` (the
    metrics of runs of one host, one run name), and how the runs read it (`readings`)."""
    found = pd.concat([run_pairs(metrics) for metrics in runs], ignore_index=True)
    names = sorted(found["run"].unique())
    if len(names) > 1:
        raise UserError(f"runs of several hosts given ({', '.join(names)}): give one host's")
    rows = []
    for (run, candidate, baseline), group in found.groupby(["run", "candidate", "baseline"]):
        if len(group) < FEWEST_RUNS:
            continue
        run_sd = between_run_sd(group["log_ratio"], group["se_log"])
        within = math.sqrt(float((group["se_log"] ** 2).mean()))
        ratios = np.exp(group["log_ratio"])
        pooled = pooled_runs(group["log_ratio"], group["se_log"], run_sd)
        if group["threshold_rule"].all():
            reads = readings(group, run_sd, threshold, confidence)
        else:  # a sweep's ratio: its verdict is not the threshold rule's
            reads = dict.fromkeys(READS, pd.NA)
        rows.append(
            (run, candidate, baseline, len(group), run_sd, within)
            + (float(ratios.min()), float(ratios.max()))
            + pooled
            + tuple(reads.values())
        )
    table = pd.DataFrame(rows, columns=[*COLUMNS, *POOLED, *READS])
    return table.astype(dict.fromkeys(READS, "Int64"))


def merged(path: Path, spread: pd.DataFrame) -> pd.DataFrame:
    """The file at `path` (if any) with the rows of spread's run replaced by `spread`."""
    if not path.exists():
        return spread
    kept = _read_frame(path)
    kept = kept[~kept["run"].isin(spread["run"].unique())]
    table = pd.concat([kept, spread], ignore_index=True).sort_values(["run", "candidate"])
    # counts stay integers (empty where a kept row of another host has none)
    return table.astype(dict.fromkeys(READS, "Int64"))


def _read_frame(path: Path) -> pd.DataFrame:
    try:
        frame = pd.read_csv(path)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as error:
        raise UserError(f"{path}: cannot read a rerun spread ({error})") from None
    missing = [column for column in COLUMNS if column not in frame]
    if missing:
        raise UserError(f"{path}: not a rerun spread (no column {missing[0]!r})")
    return frame


def read(path: str | Path) -> dict[str, dict[tuple[str, str], PairSpread]]:
    """run -> (candidate, baseline) -> PairSpread (reads empty, the pooled speedup NaN in a
    file without them)."""
    frame = _read_frame(Path(path))
    has_reads = all(column in frame for column in READS)
    for column in POOLED:
        if column not in frame:
            frame[column] = math.nan
    spread: dict = {}
    for row in frame.to_dict("records"):
        counted = has_reads and not any(pd.isna(row[c]) for c in READS)
        reads = {READS[c]: int(row[c]) for c in READS} if counted else {}
        pooled = (float(row[column]) for column in POOLED)
        spread.setdefault(row["run"], {})[(row["candidate"], row["baseline"])] = PairSpread(
            float(row["run_sd_log"]), float(row["runs"] - 1), reads, *pooled
        )
    return spread
