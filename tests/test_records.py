"""Record schema: validated on write and read, one-line errors naming the file."""

import json
import os

import pytest

from rnnopt.errors import UserError
from rnnopt.records import make_record, read_record, write_record

ENV = {
    "git": {"commit": "abc", "dirty": False},
    "python": "3.11",
    "numpy": "2",
    "cpu_model": "cpu",
    "cpu_count_logical": 2,
    "hostname": "host",
    "image": None,
}


def profile_record(**overrides):
    record = make_record(
        "profile",
        seed=0,
        config={"variant": "numpy-lstm-naive"},
        metrics={"time_ms": {"median": 1.0, "iqr": 0.1, "min": 0.9, "mean": 1.0, "n": 10}},
        env=ENV,
        variant="numpy-lstm-naive",
        framework="numpy",
        cell="lstm",
        dtype="float32",
        device="cpu",
        phase="forward",
        shape={"batch": 2, "seq_len": 3, "input_size": 4, "hidden_size": 5},
        threads=1,
        threads_effective={"requested": 1, "pools": []},
    )
    record.update(overrides)
    return record


def test_round_trip(tmp_path):
    path = tmp_path / "r.json"
    write_record(path, profile_record())
    assert read_record(path)["metrics"]["time_ms"]["median"] == 1.0
    assert not list(tmp_path.glob(".*.tmp"))  # the atomic write leaves no temporary


def test_missing_field_is_one_line_naming_the_file(tmp_path):
    record = profile_record()
    del record["seed"]
    path = tmp_path / "bad.json"
    with pytest.raises(UserError) as error:
        write_record(path, record)
    message = str(error.value)
    assert str(path) in message and "seed" in message and "\n" not in message
    assert not path.exists()


def test_bad_status_rejected(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(profile_record(status="weird", reason="x")))
    with pytest.raises(UserError, match="bad.json.*status"):
        read_record(path)


def test_status_needs_a_reason(tmp_path):
    with pytest.raises(UserError, match="reason"):
        write_record(tmp_path / "r.json", profile_record(status="oom"))


def test_bad_metric_rejected(tmp_path):
    record = profile_record()
    record["metrics"]["time_ms"]["n"] = 0
    with pytest.raises(UserError, match=r"metrics\.time_ms\.n"):
        write_record(tmp_path / "r.json", record)


def test_corrupted_file(tmp_path):
    path = tmp_path / "cut.json"
    path.write_text(json.dumps(profile_record())[:200])
    with pytest.raises(UserError, match="cut.json: not a readable JSON record"):
        read_record(path)


def test_missing_file(tmp_path):
    with pytest.raises(UserError, match="record not found"):
        read_record(tmp_path / "none.json")


def test_non_finite_numbers_become_null(tmp_path):
    path = tmp_path / "r.json"
    write_record(path, profile_record(metrics={"gflops": float("nan")}))
    assert read_record(path)["metrics"]["gflops"] is None


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_tokens_are_no_record(tmp_path, token):
    """Python's json reads them, JSON has no such numbers: a record holding one is refused by
    name, never counted as ok (issue 23, item 19)."""
    path = tmp_path / "r.json"
    write_record(path, profile_record())
    path.write_text(path.read_text().replace('"median": 1.0', f'"median": {token}'))
    with pytest.raises(UserError, match=rf"^{path}: not a readable JSON record .*{token}"):
        read_record(path)


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_records_follow_the_umask(tmp_path, umask):
    """tempfile made every record 0600: unreadable in a shared results/ (item 16)."""
    path = tmp_path / "r.json"
    old = os.umask(umask)
    try:
        write_record(path, profile_record())
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask


def test_a_failed_write_leaves_nothing_behind(tmp_path, monkeypatch):
    """A write that fails midway (a full disk) leaves neither a temporary nor a record, and an
    existing record stays as it was (item 17)."""
    path = tmp_path / "r.json"
    write_record(path, profile_record())
    before = path.read_bytes()

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        write_record(path, profile_record(seed=1))
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_numpy_only_process_records_torch_version_without_importing_it():
    import subprocess
    import sys

    code = (
        "import sys; from rnnopt.measure.host import fingerprint; env = fingerprint(); "
        "assert 'torch' not in sys.modules, 'torch imported'; print(env['torch'])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "'imported': False" in out.stdout and "'version': '2.13.0" in out.stdout


def test_a_named_commit_overrides_the_checkouts_git(monkeypatch):
    """A copied working tree can carry a stale .git (the GPU host's copy did): the commit the
    runner names wins."""
    from rnnopt.measure import host as envinfo

    monkeypatch.setenv("RNNOPT_GIT_COMMIT", "d052a33570f758716ade1d986fe3bf5d657a34f2")
    envinfo.git_state.cache_clear()
    try:
        state = envinfo.git_state()
    finally:
        envinfo.git_state.cache_clear()
    assert state == {"commit": "d052a33570f758716ade1d986fe3bf5d657a34f2", "dirty": None}


def test_the_fast_time_is_numpys_10th_percentile():
    import numpy as np

    from rnnopt.records import fast_ms

    rng = np.random.default_rng(3)
    for calls in (1, 2, 3, 7, 50):
        samples = list(rng.lognormal(0, 0.2, calls))
        assert fast_ms(samples) == pytest.approx(float(np.percentile(samples, 10)), rel=1e-12)
