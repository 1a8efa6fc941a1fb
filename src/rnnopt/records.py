"""Measurement records: built, validated against record.schema.json, written atomically, read.

Every stage writes one JSON record per measurement; a record is validated when written and
again when read, so a malformed file stops the stage that reads it with one line naming it.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import math
import os
import sys
import tempfile
import traceback
from importlib import resources
from pathlib import Path

import jsonschema

from rnnopt.errors import UserError

SCHEMA_ID = "rnnopt.record/1"
STATUSES = ("ok", "skipped", "failed", "oom", "diverged")


# The quantile of a process's timed calls that summarises it in speedups and throughputs
# (docs/intervals.md): a slow spell of the host adds time to the calls it hits, so the fast
# calls of a process are the code's own cost; the median moves with the share of calls a
# spell hits. Here, where the measuring and the reporting layers both reach it.
# A training run's fast steps (time_per_step_q10_ms), and a profile process's time
# (time_ms.q2): the calls that found this CPU uncontended (docs/intervals.md, "What a
# process contributes").
FAST_QUANTILE = 10
PROCESS_QUANTILE = 2


def fast_ms(samples_ms: list[float], quantile: float = FAST_QUANTILE) -> float:
    """The `quantile`-th percentile of timed calls, ms, interpolated linearly between the
    closest ranks (numpy's and pandas' default)."""
    ordered = sorted(samples_ms)
    position = (len(ordered) - 1) * quantile / 100
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


@functools.cache
def schema() -> dict:
    text = resources.files("rnnopt").joinpath("schemas/record.schema.json").read_text()
    return json.loads(text)


def make_record(
    kind: str,
    *,
    seed: int,
    config: dict,
    metrics: dict | None = None,
    status: str = "ok",
    reason: str | None = None,
    variant=None,
    env: dict | None = None,
    **fields,
) -> dict:
    """A record of `kind`. `variant` (a Variant) fills name, framework, cell, techniques,
    dtype and device; given as a name (str) it fills the name only, for a Variant that could
    not be built (then framework/cell/dtype/device pass as keywords). Other schema fields
    (task, phase, shape, threads, threads_effective, series, notes) pass as keywords.
    """
    from rnnopt.measure.host import fingerprint

    record = {"schema": SCHEMA_ID, "kind": kind, "status": status, "reason": reason}
    if isinstance(variant, str):
        record["variant"] = variant
    elif variant is not None:
        record.update(variant.describe())
    record.update(fields)
    record.update(
        seed=seed,
        config=config,
        metrics=metrics or {},
        env=env if env is not None else fingerprint(),
        created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    )
    return record


def validate(record: dict, source: str) -> None:
    errors = sorted(
        jsonschema.Draft202012Validator(schema()).iter_errors(record), key=lambda e: e.path
    )
    if errors:
        first = errors[0]
        where = ".".join(str(p) for p in first.absolute_path) or "(top level)"
        raise UserError(f"{source}: invalid record at {where}: {first.message}")


def _finite_or_none(value):
    """JSON has no NaN/Inf: they become null so every reader can parse the file."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite_or_none(v) for v in value]
    return value


def _file_mode() -> int:
    """rw for whom the umask allows, as open() would create a file: a record in a shared
    results/ stays readable (tempfile's files are 0600 whatever the umask)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_record(path: str | os.PathLike, record: dict) -> None:
    """Validate, then write atomically: a reader never sees half a record, a failed write
    leaves no temporary file, and the bytes are on disk before the rename makes them the
    record."""
    path = Path(path)
    record = _finite_or_none(record)
    validate(record, str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        "w", dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False
    ) as tmp:
        try:
            json.dump(record, tmp, indent=1, sort_keys=False, allow_nan=False)
            tmp.write("\n")
            tmp.flush()
            os.fsync(tmp.fileno())
            os.chmod(tmp.name, _file_mode())
        except BaseException:
            tmp.close()
            os.unlink(tmp.name)
            raise
    os.replace(tmp.name, path)


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def parse_record(text: str, source: str) -> dict:
    """The JSON object of a record file; UserError naming `source` for anything else, NaN and
    Infinity included (JSON has no such numbers; a record writes a non-finite value as null)."""
    try:
        record = json.loads(text, parse_constant=_no_constant)
    except (json.JSONDecodeError, ValueError) as error:
        raise UserError(f"{source}: not a readable JSON record ({error})") from None
    if not isinstance(record, dict):
        raise UserError(f"{source}: not a JSON object")
    return record


def read_text(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        raise UserError(f"{path}: record not found") from None
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"{path}: not a readable JSON record ({error})") from None


def read_record(path: str | os.PathLike) -> dict:
    path = Path(path)
    record = parse_record(read_text(path), str(path))
    validate(record, str(path))
    return record


def status_of(error: BaseException) -> str:
    """The record status for an exception that ended a measurement."""
    from rnnopt.errors import UnavailableError, UserError

    if isinstance(error, MemoryError) or "out of memory" in str(error).lower():
        return "oom"
    if isinstance(error, UnavailableError | UserError):
        return "skipped"
    return "failed"


def one_line(error: BaseException) -> str:
    """`Type: message` on one line (its lines joined by spaces), at most 300 characters."""
    message = " ".join(str(error).split())
    text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return text[:300]


def failure_of(error: BaseException, log=None) -> tuple[str, str]:
    """(status, one-line reason) of an exception that ended a measurement. A plain failure
    (not oom, not skipped) also prints its traceback to `log` (stderr: the job's log)."""
    status = status_of(error)
    if status == "failed":
        traceback.print_exception(error, file=log or sys.stderr)
    return status, one_line(error)
