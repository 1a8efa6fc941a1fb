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

The file (CSV) holds one row per run name and pair: run, candidate, baseline (the pair's jobs,
outcomes.job_text), runs (K), run_sd_log (tau), within_se_log (the root mean s_k^2),
speedup_low / speedup_high (the K runs' smallest and largest speedup).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from rnnopt.errors import UserError
from rnnopt.report.comparisons import COMPARISONS
from rnnopt.report.intervals import between_run_sd
from rnnopt.report.outcomes import pair_intervals, pair_keys, pairs
from rnnopt.report.table import run_data
from rnnopt.report.wide import preferred

COLUMNS = (
    *("run", "candidate", "baseline", "runs", "run_sd_log", "within_se_log"),
    *("speedup_low", "speedup_high"),
)
FEWEST_RUNS = 3  # two runs give one degree of freedom: too few to estimate a variance


def run_pairs(metrics: pd.DataFrame) -> pd.DataFrame:
    """Every timed pair of the comparison table in one run's metrics, once each: run,
    candidate, baseline, log_ratio, se_log (within the run: over its processes)."""
    rows = {}
    for run, data in run_data(metrics).items():
        for comparison in COMPARISONS:
            if comparison.method != "pair":
                continue
            matched = preferred(pairs(data.profile, comparison.candidate, comparison.baseline))
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
                    rows[(run, *key)] = (math.log(found["ratio"]), found["se_log"])
    columns = ["run", "candidate", "baseline", "log_ratio", "se_log"]
    frame = pd.DataFrame([(*key, *value) for key, value in rows.items()], columns=columns)
    # numbers even when empty (a run whose every pair a spell slowed): concatenated with the
    # other runs', an empty frame's object columns would make theirs objects too
    return frame.astype({"log_ratio": float, "se_log": float})


def estimate(runs: list[pd.DataFrame]) -> pd.DataFrame:
    """The between-run spread of every pair measured in at least FEWEST_RUNS of `runs` (the
    metrics of runs of one host, one run name)."""
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
        rows.append(
            (run, candidate, baseline, len(group), run_sd, within)
            + (float(ratios.min()), float(ratios.max()))
        )
    return pd.DataFrame(rows, columns=list(COLUMNS))


def merged(path: Path, spread: pd.DataFrame) -> pd.DataFrame:
    """The file at `path` (if any) with the rows of spread's run replaced by `spread`."""
    if not path.exists():
        return spread
    kept = _read_frame(path)
    kept = kept[~kept["run"].isin(spread["run"].unique())]
    return pd.concat([kept, spread], ignore_index=True).sort_values(["run", "candidate"])


def _read_frame(path: Path) -> pd.DataFrame:
    try:
        frame = pd.read_csv(path)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as error:
        raise UserError(f"{path}: cannot read a rerun spread ({error})") from None
    missing = [column for column in COLUMNS if column not in frame]
    if missing:
        raise UserError(f"{path}: not a rerun spread (no column {missing[0]!r})")
    return frame


def read(path: str | Path) -> dict[str, dict[tuple[str, str], tuple[float, float]]]:
    """run -> (candidate, baseline) -> (run_sd_log, its degrees of freedom: runs - 1)."""
    frame = _read_frame(Path(path))
    spread: dict = {}
    for row in frame.itertuples(index=False):
        spread.setdefault(row.run, {})[(row.candidate, row.baseline)] = (
            float(row.run_sd_log),
            float(row.runs - 1),
        )
    return spread
