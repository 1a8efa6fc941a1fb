"""Every record of every run under results/ -> one tidy (long) table of metrics, one of series.

Tidy: one row per (record, metric), with the record's descriptive fields as columns, so that
pandas groups and seaborn plots without reshaping. The run is the first directory under
results/ (results/<run>/<stage>/...), so runs from other hosts or containers merge by being
copied in; one run's records must come from one machine (env.hardware_id). Records without
metrics (skipped, failed) keep one row with an empty metric, so that their status and reason
reach the report. Series (loss curves, RSS timelines) go to a second
long table: one row per (record, series, step).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pandas as pd

from rnnopt.errors import UserError
from rnnopt.models.flops import SHAPE_KEYS
from rnnopt.records import PROCESS_QUANTILE, SCHEMA_ID, fast_ms, parse_record, read_text, validate

# The folders of profile records: the passes', and the top-up's more processes of the same jobs
# for the verdicts the passes left undecided (rnnopt topup).
PROFILE_STAGES = ("profile", "topup")
# Directories under results/<run>/ that hold records (datasets, logs and caches do not).
STAGES = (
    "verify",
    "train",
    *PROFILE_STAGES,
    "memory",
    "peak",
    "timer-check",
    "churn",
    "precision",
    "autobatch",
    "varlen",
)
# Cache sizes of one core of the host (env.cpu_caches, bytes): the C13 figure marks them.
CACHE_COLUMNS = ("l1d_bytes", "l2_bytes", "l3_bytes")
# Kinds whose records are one of several processes timing one configuration (`process`).
PER_PROCESS_KINDS = ("profile", "train")
RECORD_COLUMNS = (
    "run",
    "kind",
    "status",
    "reason",
    "variant",
    "framework",
    "cell",
    "techniques",
    "dtype",
    "device",
    "task",
    "setting",
    "phase",
    *SHAPE_KEYS,
    "threads",
    "process",
    "seed",
    "host",
    "cpu_model",
    "gpu",
    "image",
    "git_commit",
    "explanation",
    "peak_source",
    *CACHE_COLUMNS,
)
METRIC_COLUMNS = (*RECORD_COLUMNS, "metric", "value", "source")
SERIES_COLUMNS = (*RECORD_COLUMNS, "series", "step", "value", "source")
INTEGER_COLUMNS = (*SHAPE_KEYS, "threads", "process", "seed", *CACHE_COLUMNS)


def flatten(metrics: dict, prefix: str = "") -> dict[str, float]:
    """{"time_ms": {"median": 1.0}, "noisy": True} -> {"time_ms.median": 1.0, "noisy": 1.0}.

    Numbers and booleans only; null (a NaN or Inf when written) becomes NaN; strings and lists
    are left out (they are descriptions, not measurements).
    """
    flat: dict[str, float] = {}
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))
        elif value is None:
            flat[name] = math.nan
        elif isinstance(value, bool | int | float):
            flat[name] = float(value)
    return flat


def record_paths(results: Path, run: str | None = None) -> list[Path]:
    """Record files of every run (or of `run`), in a stable order; hidden files (partial
    writes) left out."""
    paths = []
    run_dirs = [results / run] if run else sorted(p for p in results.iterdir() if p.is_dir())
    for run_dir in run_dirs:
        for stage in STAGES:
            stage_dir = run_dir / stage
            if stage_dir.is_dir():
                paths += sorted(p for p in stage_dir.rglob("*.json") if not p.name.startswith("."))
    return paths


def setting_of(parts: tuple[str, ...]) -> str | None:
    """The training setting from results/<run>/train/<task>/<setting>/<variant>/..."""
    return parts[3] if len(parts) > 4 and parts[1] == "train" else None


def describe(record: dict, relative: Path) -> dict:
    """The descriptive columns of one record; run (and setting) come from its path."""
    env = record.get("env", {})
    shape = record.get("shape") or {}
    gpus = env.get("gpus") or []
    torch_env = env.get("torch") or {}
    caches = env.get("cpu_caches") or {}
    return {
        "run": relative.parts[0],
        "kind": record["kind"],
        "status": record["status"],
        "reason": record.get("reason"),
        "variant": record.get("variant"),
        "framework": record.get("framework"),
        "cell": record.get("cell"),
        "techniques": ",".join(record.get("techniques") or []) or None,
        "dtype": record.get("dtype"),
        "device": record.get("device"),
        "task": record.get("task"),
        "setting": setting_of(relative.parts),
        "phase": record.get("phase"),
        **{key: shape.get(key) for key in SHAPE_KEYS},
        "threads": record.get("threads"),
        # Records of older runs were timed in one process.
        "process": record.get("process", 0) if record["kind"] in PER_PROCESS_KINDS else None,
        "seed": record.get("seed"),
        "host": env.get("hostname"),
        "cpu_model": env.get("cpu_model"),
        "gpu": gpus[0]["name"] if gpus else torch_env.get("gpu_name"),
        "image": env.get("image"),
        "git_commit": (env.get("git") or {}).get("commit"),
        "explanation": record.get("explanation"),
        "peak_source": record.get("peak_source"),
        **{column: caches.get(column.removesuffix("_bytes")) for column in CACHE_COLUMNS},
    }


def _series_rows(record: dict, columns: dict, source: str) -> list[dict]:
    rows = []
    for name, values in (record.get("series") or {}).items():
        for step, value in enumerate(values):
            if isinstance(value, bool | int | float) or value is None:
                number = math.nan if value is None else float(value)
                rows.append(columns | {"series": name, "step": step, "value": number})
    for row in rows:
        row["source"] = source
    return rows


def load(path: Path) -> dict:
    """The record in `path`, validated. Every JSON file under a stage directory must be a
    record of this schema: anything else (no schema, another version) is an error naming the
    file, never a record silently left out."""
    data = parse_record(read_text(path), str(path))
    schema = data.get("schema")
    if schema != SCHEMA_ID:
        raise UserError(f"{path}: not an rnnopt record (schema {schema!r}; expected {SCHEMA_ID!r})")
    validate(data, str(path))
    return data


def check_one_machine(
    hardware: dict[str, tuple[str, str]], run: str, record: dict, source: str
) -> None:
    """UserError when a run's records come from two machines: results/<run>/ copied in from
    another host under a name already taken here would otherwise merge into one column.
    `hardware` maps each run to its first (hardware_id, record file); records of older runs,
    without a hardware_id, are not checked."""
    found = (record.get("env") or {}).get("hardware_id")
    if found is None:
        return
    first_id, first_source = hardware.setdefault(run, (found, source))
    if found != first_id:
        raise UserError(
            f"run {run!r} holds records of two machines: hardware_id {first_id} "
            f"({first_source}) and {found} ({source}); rename one run's folder under results/"
        )


def collect(
    results: str | os.PathLike, paths: list[Path] | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(metrics, series) of every record under `results` (or of `paths`, records under it);
    UserError for an invalid record."""
    results = Path(results)
    if not results.is_dir():
        raise UserError(f"{results}: no such results directory")
    metric_rows: list[dict] = []
    series_rows: list[dict] = []
    hardware: dict[str, tuple[str, str]] = {}
    for path in record_paths(results) if paths is None else paths:
        record = load(path)
        relative = path.relative_to(results)
        columns = describe(record, relative)
        source = relative.as_posix()
        check_one_machine(hardware, columns["run"], record, str(path))
        flat = flatten(record.get("metrics") or {}) | fast_time(record)
        if not flat:
            metric_rows.append(columns | {"metric": None, "value": math.nan, "source": source})
        metric_rows += [
            columns | {"metric": name, "value": value, "source": source}
            for name, value in flat.items()
        ]
        series_rows += _series_rows(record, columns, source)
    return _frame(metric_rows, METRIC_COLUMNS), _frame(series_rows, SERIES_COLUMNS)


def fast_time(record: dict) -> dict[str, float]:
    """{"time_ms.q2": the PROCESS_QUANTILE-th percentile of the calls} of a profile record that
    kept its timed calls (metrics.samples_ms); {} otherwise."""
    samples = (record.get("metrics") or {}).get("samples_ms")
    if record.get("kind") != "profile" or not isinstance(samples, list) or not samples:
        return {}
    return {f"time_ms.q{PROCESS_QUANTILE}": fast_ms(samples, PROCESS_QUANTILE)}


def _frame(rows: list[dict], columns: tuple[str, ...]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=list(columns))
    for column in INTEGER_COLUMNS:
        frame[column] = frame[column].astype("Int64")
    for column in ("value", "step"):
        if column in frame:
            frame[column] = pd.to_numeric(frame[column])
    text = [c for c in columns if c not in (*INTEGER_COLUMNS, "value", "step")]
    frame[text] = frame[text].astype("string")
    return frame


def csv_compression(path: str | os.PathLike) -> dict | None:
    """gzip for a .gz path (the committed reference's CSV: 6 MB plain, 0.2 MB gzipped),
    without gzip's timestamp, so that the same records give the same bytes."""
    return {"method": "gzip", "mtime": 0} if str(path).endswith(".gz") else None


def write(
    metrics: pd.DataFrame,
    series: pd.DataFrame,
    metrics_path: str | os.PathLike,
    csv_path: str | os.PathLike,
    series_path: str | os.PathLike,
) -> None:
    for path in (metrics_path, csv_path, series_path):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    metrics.to_parquet(metrics_path, index=False)
    metrics.to_csv(csv_path, index=False, compression=csv_compression(csv_path))
    series.to_parquet(series_path, index=False)


def read(metrics_path: str | os.PathLike, series_path: str | os.PathLike):
    """(metrics, series) as written by `write`."""
    for path in (metrics_path, series_path):
        if not Path(path).is_file():
            raise UserError(f"{path}: not found; run `rnnopt aggregate` first")
    return pd.read_parquet(metrics_path), pd.read_parquet(series_path)


def aggregate(results, metrics_path, csv_path, series_path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """collect + write; returns the frames."""
    metrics, series = collect(results)
    write(metrics, series, metrics_path, csv_path, series_path)
    return metrics, series
