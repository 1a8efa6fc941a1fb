"""`rnnopt --isolate`: a measurement killed by the kernel (SIGKILL, the OOM killer's signal)
still leaves its records, and the job exits 0 so the rest of the run goes on."""

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rnnopt.cli import main
from rnnopt.records import read_record
from tests.measure_helpers import TINY


def children_of(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(word) for word in path.read_text().split()] if path.exists() else []


def start_isolated_profile(tmp_path) -> subprocess.Popen:
    argv = ["--isolate", "profile", "--variant", "numpy-lstm-naive", *TINY, "--threads", "1"]
    argv += ["--phase", "forward", "step", "--min-time-s", "600", "--process", "2"]
    argv += ["--out", str(tmp_path / "{phase}.json")]
    return subprocess.Popen([sys.executable, "-m", "rnnopt", *argv], stderr=subprocess.PIPE)


def kill_child(guard: subprocess.Popen, sig: int) -> str:
    """Send sig to the guard's child once it runs; the guard's stderr."""
    deadline = time.monotonic() + 60
    while not children_of(guard.pid):
        assert guard.poll() is None and time.monotonic() < deadline, "no child started"
        time.sleep(0.05)
    time.sleep(1.0)  # let the child reach its timing loop
    for child in children_of(guard.pid):
        subprocess.run(["kill", f"-{sig}", str(child)], check=True)
    _, stderr = guard.communicate(timeout=60)
    return stderr.decode()


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGKILL, "oom"), (signal.SIGSEGV, "failed")])
def test_a_killed_measurement_leaves_every_owed_record(tmp_path, sig, status):
    guard = start_isolated_profile(tmp_path)
    stderr = kill_child(guard, sig)
    assert guard.returncode == 0, stderr
    assert f"killed by {signal.Signals(sig).name}" in stderr
    for phase in ("forward", "step"):
        record = read_record(tmp_path / f"{phase}.json")
        assert record["status"] == status and record["phase"] == phase
        assert record["variant"] == "numpy-lstm-naive" and record["process"] == 2
        assert signal.Signals(sig).name in record["reason"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["forward.json", "step.json"]


def test_a_measurement_that_ends_normally_is_the_childs_own(tmp_path):
    out = tmp_path / "record.json"
    argv = ["--isolate", "memory", "--variant", "numpy-lstm-naive", *TINY, "--threads", "1"]
    code = main([*argv, "--phase", "forward", "--calls", "1", "--out", str(out)])
    assert code == 0
    record = read_record(out)
    assert record["status"] == "ok" and record["kind"] == "memory"
    assert record["config"]["isolate"] is False  # the child's flags: it ran without --isolate


def test_isolate_is_refused_for_commands_without_a_variant_record(tmp_path, capsys):
    assert main(["--isolate", "report", "--aggregate", str(tmp_path), "--out", str(tmp_path)]) == 2
    assert "--isolate: not for report" in capsys.readouterr().err
