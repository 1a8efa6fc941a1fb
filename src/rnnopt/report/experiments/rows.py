"""Helpers the experiment rows share: ok records, numbers, "not measured here" rows."""

from __future__ import annotations

import pandas as pd

from rnnopt.report import wide
from rnnopt.report.figures import NoData  # noqa: E402
from rnnopt.report.wide import NONE

COLUMNS = ["experiment", "claim", "run", "result", "verdict"]


def ok_records(metrics: pd.DataFrame, kind: str) -> pd.DataFrame:
    frame = wide.records(metrics, kind)
    return frame[frame["status"] == "ok"]


def number(value) -> float | None:
    return None if value is None or pd.isna(value) else float(value)


def format_bytes(n: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def runs(metrics: pd.DataFrame) -> list[str]:
    return wide.runs(metrics, placeholder=True)


def missing_row(experiment: str, claim: str, why: str) -> dict:
    return {
        "experiment": experiment,
        "claim": claim,
        "result": NONE,
        "verdict": f"not measured here: {why}",
    }


def first_run(frame: pd.DataFrame, what: str) -> tuple[str, pd.DataFrame]:
    if frame.empty:
        raise NoData(f"no {what}")
    run = sorted(frame["run"].unique())[0]
    return run, frame[frame["run"] == run]


def record_series(series: pd.DataFrame, source: str, names) -> pd.DataFrame:
    """The series `names` of one record (`source`), a column each, indexed by step (NaN
    where a series is absent or shorter)."""
    rows = series[(series["source"] == source) & series["series"].isin(list(names))]
    return rows.pivot(index="step", columns="series", values="value").reindex(columns=list(names))
