"""Synthetic sequence tasks (adding, copy, sine) and their reproducible .npz + .json storage.

Every dataset holds `x` (N, T, I) float64, `target` (shape set by the task) and `lengths` (N,)
int64. With variable lengths, steps t >= lengths[n] are padding: `x` is zero there and per-step
losses average over the valid steps only (see `valid_step_mask`); padded copy targets are
IGNORE_INDEX, padded sine targets are 0, and the copy window sits at the end of each sequence's
own length.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import rnnopt
from rnnopt.errors import UserError

TASKS = ("adding", "copy", "sine")
IGNORE_INDEX = -100  # torch's cross_entropy default, so padded copy steps drop out unmasked too
ARRAY_NAMES = ("lengths", "target", "x")
# Every zip entry carries a timestamp (np.savez leaves it to zipfile, whose choice differs
# between entry points and versions); a fixed one keeps same seed = same bytes.
ZIP_DATE_TIME = (1980, 1, 1, 0, 0, 0)


@dataclass
class Dataset:
    """x (N, T, I) float64, target (task-dependent), lengths (N,) int64, manifest (JSON-able)."""

    x: np.ndarray
    target: np.ndarray
    lengths: np.ndarray
    manifest: dict[str, Any]


def valid_step_mask(lengths: np.ndarray, seq_len: int) -> np.ndarray:
    """(N, T) bool: True where step t < lengths[n], the steps a per-step loss averages over."""
    return np.arange(seq_len) < np.asarray(lengths)[:, None]


class _Task:
    """One task. make(rng, lengths, seq_len, **params) -> (x, target); sizes -> (I, outputs)."""

    defaults: dict[str, Any] = {}

    def check(self, params: dict[str, Any], shortest: int) -> str | None:
        """What is wrong with the parameters given the shortest sequence length, or None."""
        return None if shortest >= 1 else "needs sequence lengths >= 1"


class _Adding(_Task):
    """Hochreiter & Schmidhuber: sum the two values marked in channel 1, read at length-1."""

    loss = "mse_last"
    padding = "steps t >= lengths[n]: x = 0; the prediction is read at step lengths[n] - 1"

    def sizes(self, params):
        return 2, 1

    def check(self, params, shortest):
        return None if shortest >= 2 else "needs sequence lengths >= 2 (one marker per half)"

    def make(self, rng, lengths, seq_len):
        rows = np.arange(len(lengths))
        values = rng.uniform(0.0, 1.0, size=(len(lengths), seq_len))
        values *= valid_step_mask(lengths, seq_len)
        half = lengths // 2
        first = rng.integers(0, half)  # in [0, L//2)
        second = rng.integers(half, lengths)  # in [L//2, L)
        x = np.zeros((len(lengths), seq_len, 2))
        x[..., 0] = values
        x[rows, first, 1] = 1.0
        x[rows, second, 1] = 1.0
        return x, (values[rows, first] + values[rows, second])[:, None]

    def baseline(self, params, lengths):
        return 1.0 / 6.0, "predict the mean 1.0: MSE = Var(u1 + u2) = 2/12"


class _Copy(_Task):
    """Memory task: reproduce the first copy_len symbols in the last copy_len steps."""

    defaults = {"n_symbols": 8, "copy_len": 10}
    loss = "xent_steps"
    padding = (
        f"steps t >= lengths[n]: x = 0 (no class), target = {IGNORE_INDEX}; "
        "average the loss over t < lengths[n]"
    )

    def sizes(self, params):
        # inputs: symbols, blank, delimiter; outputs: symbols, blank
        return params["n_symbols"] + 2, params["n_symbols"] + 1

    def check(self, params, shortest):
        if params["n_symbols"] < 1 or params["copy_len"] < 1:
            return "n_symbols and copy_len must be >= 1"
        needed = 2 * params["copy_len"] + 1  # symbols, delimiter, copy window
        if shortest < needed:
            return f"copy_len={params['copy_len']} needs lengths >= 2*copy_len + 1 = {needed}"
        return None

    def make(self, rng, lengths, seq_len, n_symbols, copy_len):
        blank, delimiter = n_symbols, n_symbols + 1
        symbols = rng.integers(0, n_symbols, size=(len(lengths), copy_len))
        rows = np.arange(len(lengths))[:, None]
        valid = valid_step_mask(lengths, seq_len)
        codes = np.where(valid, blank, -1)  # -1: padding, one-hot encodes to all zeros
        codes[:, :copy_len] = symbols
        codes[rows[:, 0], lengths - copy_len - 1] = delimiter
        x = (codes[..., None] == np.arange(n_symbols + 2)).astype(np.float64)
        target = np.where(valid, blank, IGNORE_INDEX).astype(np.int64)
        target[rows, lengths[:, None] - copy_len + np.arange(copy_len)] = symbols
        return x, target

    def baseline(self, params, lengths):
        n_symbols, copy_len = params["n_symbols"], params["copy_len"]
        return float(copy_len * np.log(n_symbols) / np.mean(lengths)), (
            "memoryless optimum: blank surely outside the copy window, uniform over symbols "
            "inside: copy_len * ln(n_symbols) / mean(lengths), mean over all valid steps"
        )


class _Sine(_Task):
    """Forecast the clean next value of a noisy sine; omega in radians per step."""

    defaults = {"noise_std": 0.1, "omega_min": 0.1, "omega_max": 1.0}
    loss = "mse_steps"
    padding = "steps t >= lengths[n]: x = 0, target = 0; average the loss over t < lengths[n]"

    def sizes(self, params):
        return 1, 1

    def check(self, params, shortest):
        if params["noise_std"] < 0 or not 0 <= params["omega_min"] <= params["omega_max"]:
            return "needs noise_std >= 0 and 0 <= omega_min <= omega_max"
        return super().check(params, shortest)

    def make(self, rng, lengths, seq_len, noise_std, omega_min, omega_max):
        omega = rng.uniform(omega_min, omega_max, size=(len(lengths), 1))
        phase = rng.uniform(0.0, 2.0 * np.pi, size=(len(lengths), 1))
        x = rng.normal(0.0, noise_std, size=(len(lengths), seq_len))
        clean = np.sin(omega * np.arange(seq_len + 1) + phase)  # one extra step: the target
        valid = valid_step_mask(lengths, seq_len)
        x += clean[:, :-1]
        x *= valid
        return x[..., None], (clean[:, 1:] * valid)[..., None]

    def baseline(self, params, lengths):
        return 0.5, "predict the mean 0: MSE = E[sin^2] = 1/2 over a uniform phase"


_TASKS = {"adding": _Adding(), "copy": _Copy(), "sine": _Sine()}


def task_parameters(task: str, given: dict[str, Any]) -> dict[str, Any]:
    """The task's parameters with defaults filled; values (str from the CLI too) converted."""
    if task not in _TASKS:
        raise UserError(f"unknown task {task!r}; choose from {', '.join(TASKS)}")
    defaults = _TASKS[task].defaults
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        allowed = ", ".join(sorted(defaults)) or "none"
        raise UserError(f"unknown parameter {unknown[0]!r} for task {task!r}; allowed: {allowed}")
    params = dict(defaults)
    for key, value in given.items():
        kind = type(defaults[key])
        try:  # via str so that 3.5 -> int fails instead of truncating
            params[key] = kind(str(value))
        except ValueError:
            raise UserError(
                f"task {task!r} parameter {key}={value!r}: expected {kind.__name__}"
            ) from None
    return params


def generate(
    task: str,
    n_sequences: int,
    seq_len: int,
    seed: int,
    variable_length: bool = False,
    min_length: int | None = None,
    **task_params: Any,
) -> Dataset:
    """A dataset of `task` drawn from numpy.random.default_rng(seed); float64 throughout.

    lengths are all seq_len, or with variable_length drawn uniformly (integers) in
    [min_length, seq_len], min_length defaulting to seq_len//2.
    Raises UserError for an unknown task or parameter, or a length too short for the task.
    """
    params = task_parameters(task, task_params)
    spec = _TASKS[task]
    # plain Python numbers, so the manifest serialises even when numpy integers come in
    n_sequences, seq_len, seed = int(n_sequences), int(seq_len), int(seed)
    variable_length = bool(variable_length)
    if n_sequences < 1 or seq_len < 1:
        raise UserError(f"n_sequences and seq_len must be >= 1; got {n_sequences}, {seq_len}")
    shortest = seq_len
    if variable_length:
        shortest = seq_len // 2 if min_length is None else int(min_length)
        if not 1 <= shortest <= seq_len:
            raise UserError(f"min_length must be in [1, seq_len={seq_len}]; got {shortest}")
    problem = spec.check(params, shortest)
    if problem:
        lengths_from = "min_length with variable_length" if variable_length else "seq_len"
        raise UserError(f"task {task!r}: {problem}; got {params}, {lengths_from} = {shortest}")
    rng = np.random.default_rng(seed)
    lengths = np.full(n_sequences, seq_len, dtype=np.int64)
    if variable_length:
        lengths = rng.integers(shortest, seq_len + 1, size=n_sequences, dtype=np.int64)
    x, target = spec.make(rng, lengths, seq_len, **params)
    input_size, output_size = spec.sizes(params)
    baseline_loss, baseline_how = spec.baseline(params, lengths)
    arrays = {"lengths": lengths, "target": target, "x": x}
    manifest = {
        "generator": f"rnnopt.train.data.{task}",
        "task": task,
        "parameters": {
            "n_sequences": n_sequences,
            "seq_len": seq_len,
            "variable_length": variable_length,
            **({"min_length": shortest} if variable_length else {}),
            **params,
        },
        "seed": seed,
        "arrays": {name: _describe(array) for name, array in arrays.items()},
        "input_size": input_size,
        "output_size": output_size,
        "loss": spec.loss,
        "baseline_loss": baseline_loss,
        "baseline": baseline_how,
        "padding": spec.padding,
        "rnnopt_version": rnnopt.__version__,
    }
    return Dataset(x=x, target=target, lengths=lengths, manifest=manifest)


def _describe(array: np.ndarray) -> dict[str, Any]:
    return {"shape": list(array.shape), "dtype": str(array.dtype)}


def manifest_path(npz_path: str | Path) -> Path:
    return Path(npz_path).with_suffix(".json")


def save(dataset: Dataset, path: str | Path) -> Path:
    """Write path (.npz) and its .json manifest atomically; same dataset => same bytes."""
    npz_path = Path(path)
    if npz_path.suffix != ".npz":
        raise UserError(f"{npz_path}: dataset path must end in .npz")
    npz_path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {"lengths": dataset.lengths, "target": dataset.target, "x": dataset.x}
    _write_atomically(npz_path, lambda file: _write_npz(file, arrays))
    with open(npz_path, "rb") as file:
        sha256 = hashlib.file_digest(file, "sha256").hexdigest()
    manifest = {
        **dataset.manifest,
        "arrays": {name: _describe(array) for name, array in arrays.items()},
        "arrays_file": npz_path.name,
        "sha256": sha256,
    }
    text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    _write_atomically(manifest_path(npz_path), lambda file: file.write(text.encode()))
    return npz_path


def _write_npz(file, arrays: dict[str, np.ndarray]) -> None:
    with zipfile.ZipFile(file, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name in sorted(arrays):
            entry = zipfile.ZipInfo(f"{name}.npy", date_time=ZIP_DATE_TIME)
            entry.create_system = 3  # the default depends on the OS writing the file
            with archive.open(entry, "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.ascontiguousarray(arrays[name]))


def _write_atomically(path: Path, write) -> None:
    # A crash leaves at most a stray temp file, never a half-written dataset under `path`.
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temp, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)


def load(path: str | Path) -> Dataset:
    """Read a saved dataset, verifying sha256, array names, shapes and dtypes.

    Any problem raises UserError with one line naming the file and what is wrong.
    """
    npz_path = Path(path)
    json_path = manifest_path(npz_path)
    manifest = _read_manifest(npz_path, json_path)
    try:
        with open(npz_path, "rb") as file:
            sha256 = hashlib.file_digest(file, "sha256").hexdigest()
    except OSError as error:
        raise UserError(f"{npz_path}: cannot read: {error.strerror}") from None
    if sha256 != manifest["sha256"]:
        raise UserError(
            f"{npz_path}: sha256 {sha256[:12]}... does not match {json_path.name} "
            f"({str(manifest['sha256'])[:12]}...): file corrupted, truncated or replaced"
        )
    try:
        with np.load(npz_path, allow_pickle=False) as archive:
            arrays = {name.removesuffix(".npy"): archive[name] for name in archive.files}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as error:
        reason = " ".join(str(error).split())
        raise UserError(f"{npz_path}: not a readable .npz ({reason})") from None
    expected = manifest["arrays"]
    if sorted(arrays) != sorted(expected):
        raise UserError(f"{npz_path}: holds arrays {sorted(arrays)}, manifest {sorted(expected)}")
    for name, array in arrays.items():
        if _describe(array) != expected[name]:
            raise UserError(
                f"{npz_path}: array {name!r} is {_describe(array)}, manifest says {expected[name]}"
            )
    return Dataset(
        x=arrays["x"], target=arrays["target"], lengths=arrays["lengths"], manifest=manifest
    )


def _read_manifest(npz_path: Path, json_path: Path) -> dict[str, Any]:
    if npz_path.suffix != ".npz":
        raise UserError(f"{npz_path}: dataset path must end in .npz")
    if not npz_path.is_file():
        raise UserError(f"{npz_path}: no such dataset file")
    if not json_path.is_file():
        raise UserError(f"{json_path}: manifest of {npz_path.name} is missing")
    try:
        manifest = json.loads(json_path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UserError(f"{json_path}: unreadable manifest ({error})") from None
    required = ("sha256", "arrays", "task", "loss", "input_size", "output_size")
    missing = [key for key in required if not isinstance(manifest, dict) or key not in manifest]
    if missing:
        raise UserError(f"{json_path}: manifest lacks key {missing[0]!r}")
    arrays = manifest["arrays"]
    if not isinstance(arrays, dict) or sorted(arrays) != sorted(ARRAY_NAMES):
        raise UserError(f"{json_path}: 'arrays' must describe {', '.join(ARRAY_NAMES)}")
    return manifest
