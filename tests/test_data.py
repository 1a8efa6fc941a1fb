"""Synthetic datasets: task semantics, variable lengths, byte-identical saves, guarded loads."""

import hashlib
import json
import time
import zipfile

import numpy as np
import pytest

from rnnopt.cli import main
from rnnopt.errors import UserError
from rnnopt.train import data


def sha256_of(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def saved(tmp_path, name="adding", **kwargs):
    options = {"task": "adding", "n_sequences": 8, "seq_len": 12, "seed": 0, **kwargs}
    return data.save(data.generate(**options), tmp_path / f"{name}.npz")


@pytest.mark.parametrize("task", data.TASKS)
@pytest.mark.parametrize("variable_length", [False, True])
def test_shapes_dtypes_and_manifest(task, variable_length):
    dataset = data.generate(task, 16, 42, seed=3, variable_length=variable_length)
    manifest = dataset.manifest
    n, t, i = dataset.x.shape
    assert (n, t, i) == (16, 42, manifest["input_size"])
    assert dataset.x.dtype == np.float64 and dataset.lengths.dtype == np.int64
    expected_target = {"adding": (16, 1), "copy": (16, 42), "sine": (16, 42, 1)}[task]
    assert dataset.target.shape == expected_target
    losses = {"adding": "mse_last", "copy": "xent_steps", "sine": "mse_steps"}
    assert manifest["loss"] == losses[task]
    assert manifest["generator"] == f"rnnopt.train.data.{task}"
    assert manifest["parameters"]["seq_len"] == 42
    assert manifest["baseline_loss"] > 0
    lengths = dataset.lengths
    assert ((lengths >= 21) & (lengths <= 42)).all()
    if variable_length:
        assert len(set(lengths.tolist())) > 1
        padding = ~data.valid_step_mask(lengths, 42)
        assert (dataset.x[padding] == 0).all()
    else:
        assert (lengths == 42).all()


def test_adding_target_is_sum_of_marked_values_one_marker_per_half():
    dataset = data.generate("adding", 200, 31, seed=1, variable_length=True)
    values, markers = dataset.x[..., 0], dataset.x[..., 1]
    assert set(np.unique(markers)) == {0.0, 1.0}
    for n, length in enumerate(dataset.lengths):
        marked = np.flatnonzero(markers[n])
        assert len(marked) == 2
        assert marked[0] < length // 2 <= marked[1] < length
        assert dataset.target[n, 0] == values[n, marked].sum()
    assert dataset.manifest["baseline_loss"] == pytest.approx(1 / 6)
    assert np.var(data.generate("adding", 5000, 10, seed=2).target) == pytest.approx(1 / 6, 0.1)


def test_copy_targets_reproduce_the_symbols_before_the_delimiter():
    n_symbols, copy_len = 5, 4
    dataset = data.generate(
        "copy", 50, 24, seed=2, variable_length=True, n_symbols=n_symbols, copy_len=copy_len
    )
    blank, delimiter = n_symbols, n_symbols + 1
    for n, length in enumerate(dataset.lengths):
        x, target = dataset.x[n], dataset.target[n]
        assert (x[:length].sum(axis=1) == 1).all()  # one-hot on valid steps
        codes = x[:length].argmax(axis=1)
        symbols = codes[:copy_len]
        assert (symbols < n_symbols).all()
        assert codes[length - copy_len - 1] == delimiter
        others = np.delete(np.arange(copy_len, length), length - copy_len - 1 - copy_len)
        assert (codes[others] == blank).all()
        assert (target[length - copy_len : length] == symbols).all()
        assert (target[: length - copy_len] == blank).all()
        assert (target[length:] == data.IGNORE_INDEX).all()
    expected = copy_len * np.log(n_symbols) / dataset.lengths.mean()
    assert dataset.manifest["baseline_loss"] == pytest.approx(expected)
    assert dataset.manifest["output_size"] == n_symbols + 1


def test_copy_length_must_fit_names_copy_len():
    with pytest.raises(UserError, match="copy_len"):
        data.generate("copy", 2, 20, seed=0)
    data.generate("copy", 2, 21, seed=0)


def test_sine_target_is_next_clean_value():
    clean = data.generate("sine", 20, 30, seed=4, noise_std=0.0)
    assert np.allclose(clean.target[:, :-1], clean.x[:, 1:], atol=1e-12, rtol=0)
    noisy = data.generate("sine", 20, 30, seed=4, noise_std=0.1)
    assert np.allclose(noisy.target, clean.target, atol=1e-12, rtol=0)
    noise = noisy.x - clean.x
    assert 0.05 < noise.std() < 0.15


def test_unknown_task_or_parameter_lists_allowed():
    with pytest.raises(UserError, match="'copyy'.*adding, copy, sine"):
        data.generate("copyy", 2, 30, seed=0)
    with pytest.raises(UserError, match="'noise'.*noise_std"):
        data.generate("sine", 2, 30, seed=0, noise=0.1)
    with pytest.raises(UserError, match="n_symbols"):
        data.generate("copy", 2, 30, seed=0, n_symbols="3.5")


def test_same_seed_same_bytes_at_different_times(tmp_path, monkeypatch):
    first = saved(tmp_path / "a")
    # an hour later by every clock zipfile could read (its timestamps have 2 s resolution)
    later, real_localtime = time.time() + 3600, time.localtime
    monkeypatch.setattr(time, "time", lambda: later)
    monkeypatch.setattr(time, "localtime", lambda s=None: real_localtime(later if s is None else s))
    second = saved(tmp_path / "b")
    assert sha256_of(first) == sha256_of(second)
    assert sha256_of(first.with_suffix(".json")) == sha256_of(second.with_suffix(".json"))
    other = saved(tmp_path / "c", seed=1)
    assert sha256_of(other) != sha256_of(first)
    assert sha256_of(other.with_suffix(".json")) != sha256_of(first.with_suffix(".json"))
    with zipfile.ZipFile(second) as archive:
        assert {entry.date_time for entry in archive.infolist()} == {data.ZIP_DATE_TIME}


def test_round_trip_and_manifest_contents(tmp_path):
    dataset = data.generate("copy", 6, 30, seed=5, variable_length=True, copy_len=3)
    path = data.save(dataset, tmp_path / "nested" / "copy.npz")
    loaded = data.load(path)
    for name in ("x", "target", "lengths"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(dataset, name))
        assert getattr(loaded, name).dtype == getattr(dataset, name).dtype
    manifest = json.loads(path.with_suffix(".json").read_text())
    assert manifest == loaded.manifest
    assert manifest["sha256"] == sha256_of(path)
    assert manifest["parameters"] == {
        "n_sequences": 6,
        "seq_len": 30,
        "variable_length": True,
        "min_length": 15,  # lengths uniform in [min_length, seq_len], default seq_len // 2
        "n_symbols": 8,
        "copy_len": 3,
    }
    assert manifest["arrays"]["x"] == {"shape": [6, 30, 10], "dtype": "float64"}
    assert manifest["seed"] == 5 and manifest["rnnopt_version"]
    with zipfile.ZipFile(path) as archive:
        assert archive.namelist() == ["lengths.npy", "target.npy", "x.npy"]
    assert sorted(p.name for p in path.parent.iterdir()) == ["copy.json", "copy.npz"]


def flip_byte(path, offset):
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0xFF
    path.write_bytes(bytes(raw))


def rewrite_manifest(path, **changes):
    manifest_file = path.with_suffix(".json")
    manifest = json.loads(manifest_file.read_text())
    manifest.update(changes)
    manifest_file.write_text(json.dumps(manifest))


def corrupt_flipped(path):
    flip_byte(path, len(path.read_bytes()) // 2)


def corrupt_truncated(path):
    path.write_bytes(path.read_bytes()[:-100])


def corrupt_truncated_with_matching_sha(path):
    # The sha256 check would catch it first; this reaches the .npz parser itself.
    corrupt_truncated(path)
    rewrite_manifest(path, sha256=sha256_of(path))


def corrupt_manifest_missing(path):
    path.with_suffix(".json").unlink()


def corrupt_manifest_not_json(path):
    path.with_suffix(".json").write_text("{not json")


def corrupt_manifest_shape(path):
    manifest = json.loads(path.with_suffix(".json").read_text())
    manifest["arrays"]["x"]["shape"] = [1, 2, 3]
    rewrite_manifest(path, arrays=manifest["arrays"])


def corrupt_npz_missing(path):
    path.unlink()


@pytest.mark.parametrize(
    ("corrupt", "names", "says"),
    [
        (corrupt_flipped, "npz", "sha256"),
        (corrupt_truncated, "npz", "sha256"),
        (corrupt_truncated_with_matching_sha, "npz", "not a readable .npz"),
        (corrupt_manifest_missing, "json", "missing"),
        (corrupt_manifest_not_json, "json", "unreadable manifest"),
        (corrupt_manifest_shape, "npz", "manifest says"),
        (corrupt_npz_missing, "npz", "no such dataset file"),
    ],
)
def test_bad_files_raise_one_line_naming_the_file(tmp_path, corrupt, names, says):
    path = saved(tmp_path)
    corrupt(path)
    with pytest.raises(UserError) as raised:
        data.load(path)
    message = str(raised.value)
    named = path if names == "npz" else path.with_suffix(".json")
    assert str(named) in message and says in message
    assert "\n" not in message


def test_save_rejects_other_suffixes_and_leaves_no_temp_files(tmp_path):
    with pytest.raises(UserError, match=r"x\.npy.*\.npz"):
        data.save(data.generate("sine", 2, 5, seed=0), tmp_path / "x.npy")
    saved(tmp_path)
    saved(tmp_path)  # overwriting goes through os.replace too
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adding.json", "adding.npz"]


def test_cli_make_inspect_and_corrupted(tmp_path, capsys):
    out = tmp_path / "results" / "datasets" / "copy.npz"
    argv = ["data", "make", "--task", "copy", "--n-sequences", "8", "--seq-len", "30"]
    argv += ["--seed", "1", "--variable-length", "--param", "copy_len=4", "--out", str(out)]
    assert main(argv) == 0
    made = capsys.readouterr().out.strip().splitlines()
    assert len(made) == 1 and str(out) in made[0]
    assert data.load(out).manifest["parameters"]["copy_len"] == 4

    assert main(["data", "inspect", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "task copy" in shown and "verified" in shown

    flip_byte(out, 200)
    assert main(["data", "inspect", str(out)]) == 2
    captured = capsys.readouterr()
    errors = captured.err.strip().splitlines()
    assert len(errors) == 1 and str(out) in errors[0] and captured.out == ""


@pytest.mark.parametrize(
    ("extra", "says"),
    [(["--task", "nope"], "unknown task 'nope'"), (["--param", "bogus=1"], "'bogus'")],
)
def test_cli_bad_task_or_param_exits_2(tmp_path, capsys, extra, says):
    argv = ["data", "make", "--task", "adding", "--n-sequences", "2", "--seq-len", "10"]
    assert main([*argv, "--out", str(tmp_path / "a.npz"), *extra]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 1 and says in errors[0]


def test_crash_while_writing_keeps_the_previous_dataset(tmp_path, monkeypatch):
    path = saved(tmp_path)
    before = sha256_of(path), sha256_of(path.with_suffix(".json"))

    def crash(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(np.lib.format, "write_array", crash)
    with pytest.raises(KeyboardInterrupt):
        saved(tmp_path, seed=1)
    assert (sha256_of(path), sha256_of(path.with_suffix(".json"))) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adding.json", "adding.npz"]
    data.load(path)


def test_cli_dataset_beyond_memory_is_one_line_and_writes_nothing(tmp_path, capsys):
    argv = ["data", "make", "--task", "adding", "--n-sequences", "100000000"]
    assert main([*argv, "--seq-len", "100000", "--out", str(tmp_path / "a.npz")]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 1 and "--n-sequences 100000000 --seq-len 100000" in errors[0]
    assert "does not fit in memory" in errors[0] and list(tmp_path.iterdir()) == []
