"""ci/slurm-start.sh and ci/slurm-stop.sh never empty, remove or signal from a directory they
did not make (the state directory carries a marker from its creation)."""

import os
import subprocess
from pathlib import Path

import pytest

CI = Path(__file__).resolve().parents[1] / "ci"


def script(name: str, state: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "RNNOPT_SLURM_DIR": state}
    return subprocess.run(
        ["bash", str(CI / name)], capture_output=True, text=True, env=env, timeout=60, check=False
    )


@pytest.fixture
def victim(tmp_path):
    important = tmp_path / "victim" / "important"
    important.mkdir(parents=True)
    (important / "f").write_text("x")
    (tmp_path / "victim" / "run").mkdir()
    (tmp_path / "victim" / "run" / "slurmd.pid").write_text(str(os.getpid()))
    return tmp_path / "victim"


@pytest.mark.parametrize("spelling", ["{}", "{}/", "{}/important/.."])
def test_stop_leaves_a_directory_it_did_not_make(victim, spelling):
    done = script("slurm-stop.sh", spelling.format(victim))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "not made by ci/slurm-start.sh" in done.stdout
    assert (victim / "important" / "f").read_text() == "x"


@pytest.mark.skipif(os.geteuid() != 0, reason="slurm-start.sh runs as root only")
@pytest.mark.parametrize("state", ["{victim}", "{victim}/", "/tmp/"])
def test_start_refuses_a_directory_it_did_not_make(victim, state):
    done = script("slurm-start.sh", state.format(victim=victim))
    assert done.returncode == 2, done.stdout + done.stderr
    assert (victim / "important" / "f").read_text() == "x"
