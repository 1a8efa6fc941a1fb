"""Static checks of the container and cluster files; they run everywhere, with no Docker.

The real build-and-run check is ci/docker-check.sh.
"""

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"
SLURM_PROFILE = ROOT / "workflow" / "profiles" / "slurm"


def find_tool(name: str) -> str | None:
    """A tool on PATH or beside this interpreter (a virtualenv's bin/ is often not on PATH)."""
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return shutil.which(name, path=path)


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    pairs = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            instruction, _, arguments = line.strip().partition(" ")
            pairs.append((instruction.upper(), arguments.strip()))
    return pairs


def build_args() -> dict[str, str]:
    args = {}
    for instruction, arguments in dockerfile_instructions():
        if instruction == "ARG":
            name, _, default = arguments.partition("=")
            args[name] = default
    return args


def lock_version(package: str) -> str:
    lock = (ROOT / "requirements" / "lock.txt").read_text()
    return re.search(rf"^{package}==(\S+)$", lock, flags=re.MULTILINE | re.IGNORECASE)[1]


def test_one_stage_from_the_base_image_argument():
    froms = [args for instruction, args in dockerfile_instructions() if instruction == "FROM"]
    assert froms == ["${BASE_IMAGE}"]
    assert build_args()["BASE_IMAGE"] == "python:3.11-slim-bookworm"


def test_no_syntax_directive():
    # A `# syntax=` line makes BuildKit fetch a frontend image from a registry.
    assert not re.search(r"^#\s*syntax\s*=", DOCKERFILE.read_text(), flags=re.MULTILINE | re.I)


def test_build_arguments():
    args = build_args()
    assert args["TORCH_VARIANT"] == "cpu"
    assert args["IMAGE_TAG"] == "rnnopt:cpu"
    assert args["GIT_COMMIT"] == "unknown"
    assert args["PIP_FIND_LINKS"] == ""
    assert args["TORCH_INDEX_URL"] == ""
    text = DOCKERFILE.read_text()
    assert "https://download.pytorch.org/whl/cpu" in text
    assert "https://download.pytorch.org/whl/cu130" in text


def test_environment_names_the_image_and_the_commit():
    env = " ".join(args for instruction, args in dockerfile_instructions() if instruction == "ENV")
    for setting in (
        "RNNOPT_IMAGE=${IMAGE_TAG}",
        "RNNOPT_GIT_COMMIT=${GIT_COMMIT}",
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
        "VIRTUAL_ENV=/opt/venv",
        "HOME=/tmp",
        "USER=rnnopt",
    ):
        assert setting in env.split(), setting


def test_torch_version_comes_from_the_lock():
    # The Dockerfile reads the pin from the lock; the lock and pyproject must agree.
    assert "sed -n 's/^torch==//p' requirements/lock.txt" in DOCKERFILE.read_text()
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'"torch=={lock_version("torch")}"' in pyproject
    assert "+" not in lock_version("torch"), "the lock's torch pin must carry no local label"


def test_project_installed_non_editable_under_the_lock():
    runs = [args for instruction, args in dockerfile_instructions() if instruction == "RUN"]
    assert any("-c requirements/lock.txt ." in run for run in runs)
    assert not any(re.search(r"pip install[^&]*\s(-e|--editable)\s", run) for run in runs)


def test_default_command_runs_the_workflow():
    cmds = [args for instruction, args in dockerfile_instructions() if instruction == "CMD"]
    assert [json.loads(cmd) for cmd in cmds] == [["snakemake", "--cores", "all"]]


def test_the_image_never_runs_as_root_by_default():
    """Without `--user` the workflow ran as root (issue 23, item 22): the last USER is an
    unprivileged uid, set after every RUN (which installs as root)."""
    instructions = [instruction for instruction, _ in dockerfile_instructions()]
    users = [args for instruction, args in dockerfile_instructions() if instruction == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert instructions.index("USER") > max(i for i, x in enumerate(instructions) if x == "RUN")


def dockerignore_patterns() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def ignored(path: str) -> bool:
    """Close enough to Docker's matching for plain patterns: fnmatch, `**/` for any depth."""
    ignore = False
    for pattern in dockerignore_patterns():
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").strip("/")
        candidates = [pattern, pattern.removeprefix("**/")] if "**/" in pattern else [pattern]
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        names = prefixes + (parts if "**/" in pattern else [])
        if any(fnmatch.fnmatchcase(name, c) for name in names for c in candidates):
            ignore = not negate
    return ignore


@pytest.mark.parametrize(
    "path",
    [
        "results",
        "results/cpu-host/profile/x.json",
        ".venv",
        ".snakemake",
        ".git",
        ".pytest_cache",
        ".ruff_cache",
        "src/rnnopt/__pycache__/cli.cpython-311.pyc",
        "src/rnnopt.egg-info",
    ],
)
def test_dockerignore_keeps_out(path):
    assert ignored(path), f"{path} would be sent in the build context"


@pytest.mark.parametrize(
    "path",
    [
        "Snakefile",
        "pyproject.toml",
        "requirements/lock.txt",
        "src/rnnopt/cli/__init__.py",
        "src/rnnopt/schemas/record.schema.json",
        "workflow/rules/common.smk",
        "config/config.yaml",
    ],
)
def test_dockerignore_keeps_in(path):
    assert not ignored(path), f"{path} is needed in the image"


@pytest.mark.skipif(find_tool("hadolint") is None, reason="hadolint not installed")
def test_hadolint_clean():
    done = subprocess.run(
        [find_tool("hadolint"), "--config", str(ROOT / ".hadolint.yaml"), str(DOCKERFILE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_docker_check_script_parses():
    subprocess.run(["bash", "-n", str(ROOT / "ci" / "docker-check.sh")], check=True)


@pytest.mark.skipif(find_tool("shellcheck") is None, reason="shellcheck not installed")
def test_docker_check_script_shellcheck_clean():
    subprocess.run([find_tool("shellcheck"), str(ROOT / "ci" / "docker-check.sh")], check=True)


def timing_rules() -> set[str]:
    """Rules that take every core for their timed jobs (threads: all_cores, i.e. workflow.cores;
    train_cores: every core for the timed train experiments, one for the untimed base runs)."""
    names = set()
    for path in (ROOT / "workflow" / "rules").glob("*.smk"):
        for block in re.split(r"^(?=rule \w+:)", path.read_text(), flags=re.MULTILINE):
            rule = re.match(r"rule (\w+):", block)
            threads = r"^\s+threads:\s*(all_cores|train_cores)\s*$"
            if rule and re.search(threads, block, re.MULTILINE):
                names.add(rule[1])
    return names


def slurm_profile() -> dict:
    return yaml.safe_load((SLURM_PROFILE / "config.yaml").read_text())


def test_slurm_profile_uses_the_slurm_executor():
    profile = slurm_profile()
    assert profile["executor"] == "slurm"
    assert {"slurm_partition", "runtime", "mem_mb"} <= set(profile["default-resources"])


def test_every_timing_rule_gets_an_exclusive_node():
    rules = timing_rules()
    assert rules >= {"peak", "timer_check", "profile", "train"}
    per_rule = slurm_profile()["set-resources"]
    for rule in sorted(rules):
        assert "--exclusive" in per_rule.get(rule, {}).get("slurm_extra", ""), rule


def test_slurm_profile_names_existing_rules():
    rule_names = {
        match
        for path in (ROOT / "workflow" / "rules").glob("*.smk")
        for match in re.findall(r"^rule (\w+):", path.read_text(), flags=re.MULTILINE)
    }
    if not rule_names:
        pytest.skip("no workflow rules yet")
    assert set(slurm_profile()["set-resources"]) <= rule_names


def slurm_plugin_installed() -> bool:
    done = subprocess.run(
        [sys.executable, "-c", "import snakemake_executor_plugin_slurm"],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not (ROOT / "config" / "ci.yaml").is_file(), reason="no config/ci.yaml")
def test_slurm_profile_dry_run():
    if not slurm_plugin_installed():
        pytest.skip("snakemake-executor-plugin-slurm not installed (the `slurm` extra)")
    env = dict(
        os.environ,
        RNNOPT_SLURM_NODE_CORES="8",
        RNNOPT_SLURM_PARTITION="compute",
        RNNOPT_SLURM_ACCOUNT="rnnopt",
    )
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "--profile", str(SLURM_PROFILE), "-n"]
        + ["--configfile", "config/ci.yaml"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
