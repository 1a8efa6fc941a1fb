"""A run's profile samples as a pyperf benchmark suite, for pyperf's own tools (stats, hist,
compare_to).

One benchmark per profile row (variant, dtype, device, shape, phase, threads), one pyperf run per
process (record), its values that process's timed calls (samples_ms) in seconds. Records
without samples_ms (written before the profile kept them) are left out.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyperf

from rnnopt.errors import UserError
from rnnopt.report.aggregate import PROFILE_STAGES, load
from rnnopt.report.wide import DTYPE_SHORT, shape_text


def benchmark_name(record: dict) -> str:
    """'numpy-lstm-fused f32 cpu B16 T20 I32 H64 step threads1'."""
    dtype = DTYPE_SHORT.get(record["dtype"], record["dtype"])
    return (
        f"{record['variant']} {dtype} {record['device']} {shape_text(record['shape'])} "
        f"{record['phase']} threads{record['threads']}"
    )


def _metadata(record: dict) -> dict:
    """The run's metadata in pyperf's keys; pyperf refuses empty values, so those are left out."""
    env = record.get("env") or {}
    known = {
        "name": benchmark_name(record),
        "unit": "second",
        "loops": 1,  # every value is one call
        "process": record.get("process", 0),
        "hostname": env.get("hostname"),
        "cpu_model_name": env.get("cpu_model"),
        "python_version": env.get("python"),
        "date": record.get("created"),
    }
    return {key: value for key, value in known.items() if value not in (None, "")}


def _profile_records(run_dir: Path) -> list[dict]:
    profile = run_dir / "profile"
    if not run_dir.is_dir():
        raise UserError(f"{run_dir}: no such folder")
    if not profile.is_dir():
        raise UserError(f"{run_dir}: no profile/ folder in it (expected a run: results/<run>/)")
    folders = [run_dir / stage for stage in PROFILE_STAGES]
    paths = sorted(p for f in folders for p in f.rglob("*.json") if not p.name.startswith("."))
    return [load(path) for path in paths]


def suite(run_dir: str | os.PathLike) -> pyperf.BenchmarkSuite:
    """The suite of a run folder's profile records that kept their samples."""
    runs: dict[str, list[tuple[int, pyperf.Run]]] = {}
    for record in _profile_records(Path(run_dir)):
        samples_ms = (record.get("metrics") or {}).get("samples_ms")
        if record["status"] != "ok" or not samples_ms:
            continue
        run = pyperf.Run(
            [ms / 1e3 for ms in samples_ms], metadata=_metadata(record), collect_metadata=False
        )
        runs.setdefault(benchmark_name(record), []).append((record.get("process", 0), run))
    if not runs:
        raise UserError(f"{run_dir}: no ok profile record with samples_ms (older records lack it)")
    benchmarks = [
        pyperf.Benchmark([run for _, run in sorted(found, key=lambda pair: pair[0])])
        for _, found in sorted(runs.items())
    ]
    return pyperf.BenchmarkSuite(benchmarks)


def export(run_dir: str | os.PathLike, out_path: str | os.PathLike) -> pyperf.BenchmarkSuite:
    """Write the suite of `run_dir` to `out_path` (JSON; .json.gz compressed); returns it."""
    found = suite(run_dir)
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    found.dump(str(out_path), replace=True)
    return found
