"""The workflow under the SLURM profile (workflow/profiles/slurm, snakemake-executor-plugin-slurm).

Without a cluster: dry runs of the profile on the default and full configs, and the resources
they ask for. Marked `slurm`, on a real cluster (CI starts a one-node one: ci/slurm-start.sh;
elsewhere they skip when `sinfo` does not answer): the real Snakefile on config/ci.yaml,
interrupted mid-way and resumed to the end; sacct shows every job COMPLETED with the memory,
time and CPUs its rule asked for, timing jobs on a whole node, CUDA jobs with a GPU and never
more at once than the cluster has; a job made to fail stops Snakemake with SLURM's reason.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from rnnopt.models.flops import Shape, memory_model
from tests.measure_helpers import default_sigint

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "workflow" / "profiles" / "slurm"
WORKFLOW_FILES = ("Snakefile", "workflow", "config")
SUBMITTED = re.compile(r"Job (\d+) has been submitted with SLURM jobid (\d+) \(log: (.+)\)\.")
# Status checks every 2 s instead of the plugin's 40 s: the test jobs take seconds.
FAST_STATUS = ("--slurm-init-seconds-before-status-checks", "2")
# The ci config is about 65 jobs, a quarter of them on the whole node one at a time: about 17
# minutes on a 2-core machine that other work loads to 5-8.
RUN_TIMEOUT_S = 2400

pytestmark = pytest.mark.skipif(
    subprocess.run(
        [sys.executable, "-c", "import snakemake_executor_plugin_slurm"], capture_output=True
    ).returncode
    != 0,
    reason="snakemake-executor-plugin-slurm not installed (make install installs it)",
)


def copy_workflow(target: Path) -> Path:
    """The workflow (not results/ or .snakemake/) in a fresh directory."""
    target.mkdir(parents=True, exist_ok=True)
    for name in WORKFLOW_FILES:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, target / name, symlinks=True)
        else:
            shutil.copy2(source, target / name)
    return target


def snakemake_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "snakemake", "--profile", str(PROFILE), *args]


def job_blocks(log: str) -> dict[int, dict]:
    """Snakemake's job blocks by job id: rule, wildcards, threads and resources it asked for."""
    jobs = {}
    for block in re.split(r"\n(?=(?:local)?rule \w+:\n)", log):
        rule = re.match(r"(?:local)?rule (\w+):\n", block)
        jobid = re.search(r"^\s+jobid: (\d+)$", block, flags=re.MULTILINE)
        if not (rule and jobid):
            continue
        resources = re.search(r"^\s+resources: (.+)$", block, flags=re.MULTILINE)
        threads = re.search(r"^\s+threads: (\d+)$", block, flags=re.MULTILINE)
        wildcards = re.search(r"^\s+wildcards: (.+)$", block, flags=re.MULTILINE)
        jobs[int(jobid.group(1))] = {
            "rule": rule.group(1),
            "threads": int(threads.group(1)) if threads else 1,
            "resources": dict(
                item.split("=", 1) for item in resources.group(1).split(", ") if "=" in item
            )
            if resources
            else {},
            "wildcards": dict(item.split("=", 1) for item in wildcards.group(1).split(", "))
            if wildcards
            else {},
        }
    return jobs


# ---------------------------------------------------------------- without a cluster


def dry_run(config: str | None) -> dict[int, dict]:
    env = dict(
        os.environ,
        RNNOPT_SLURM_NODE_CORES="32",
        RNNOPT_SLURM_PARTITION="compute",
        RNNOPT_SLURM_ACCOUNT="rnnopt",
    )
    extra = ["--configfile", f"config/{config}.yaml"] if config else []
    done = subprocess.run(
        snakemake_command("-n", "--forceall", *extra),
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return job_blocks(done.stdout + done.stderr)


@pytest.mark.parametrize("config", [None, "full"])
def test_dry_run_asks_for_honest_resources(config):
    jobs = dry_run(config).values()
    assert jobs
    for job in jobs:
        resources = job["resources"]
        assert resources["slurm_partition"] == "compute", job
        assert int(resources["mem_mb"]) >= 1000 and int(resources["runtime"]) >= 1, job
        # the CUDA verify records have a job of their own (verify_cuda), without a device wildcard
        cuda = job["wildcards"].get("device") == "cuda" or job["rule"] == "verify_cuda"
        assert int(resources.get("gpu", 0)) == (1 if cuda else 0), job
    measured = [job for job in jobs if job["rule"] == "profile"]
    assert measured and {"cuda", "cpu"} <= {job["wildcards"]["device"] for job in measured}

    def tokens_by_width(job):
        w = job["wildcards"]
        return int(w["batch"]) * int(w["seq_len"]) * (int(w["input_size"]) + int(w["hidden_size"]))

    # More work and more activations: more memory and more time, never less.
    ordered = sorted(measured, key=tokens_by_width)
    smallest, largest = ordered[0], ordered[-1]
    if tokens_by_width(largest) > tokens_by_width(smallest):
        for key in ("mem_mb", "runtime"):
            assert int(largest["resources"][key]) >= int(smallest["resources"][key])
    timing = {job["rule"] for job in jobs if job["threads"] == 32}
    assert {"profile", "peak", "train"} <= timing  # threads: all_cores is the whole node


def test_full_config_memory_covers_the_bptt_minimum():
    """Every measuring job of config/full.yaml asks for at least the resident memory of a job
    before it computes (about 500 MiB measured: Snakemake plus torch imported) plus the analytic
    minimum of its step at its shape and dtype; the requests follow the shape."""
    measured = [j for j in dry_run("full").values() if j["rule"] in ("profile", "memory")]
    assert measured
    for job in measured:
        w = job["wildcards"]
        shape = Shape(*(int(w[k]) for k in ("batch", "seq_len", "input_size", "hidden_size")))
        cell = w["variant"].split("-")[1]
        minimum = memory_model(cell, shape, w["dtype"], "step")["minimum_bytes"]
        assert int(job["resources"]["mem_mb"]) * 2**20 >= 500 * 2**20 + minimum, job
    assert len({job["resources"]["mem_mb"] for job in measured}) > 1


# ---------------------------------------------------------------- on a real cluster


def sinfo(fields: str) -> list[str]:
    done = subprocess.run(
        ["sinfo", "-h", "-o", fields], capture_output=True, text=True, timeout=30, check=True
    )
    return done.stdout.split()


def cluster_env() -> dict[str, str]:
    """The profile's variables for the cluster that answers: its default partition, the
    user's default account, the cores of its nodes; unless already set."""
    partitions = sinfo("%P")
    default = next((p for p in partitions if p.endswith("*")), partitions[0]).rstrip("*")
    account = subprocess.run(
        [
            "sacctmgr",
            "-n",
            "-P",
            "show",
            "user",
            os.environ.get("USER", "root"),
            "format=defaultaccount",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.strip()
    env = {
        "RNNOPT_SLURM_PARTITION": default,
        "RNNOPT_SLURM_ACCOUNT": account or "rnnopt",
        "RNNOPT_SLURM_NODE_CORES": sinfo("%c")[0],
    }
    if cluster_gpus() == 0:
        env["RNNOPT_CUDA_JOB_GPUS"] = "0"  # no GPU to ask for: CUDA jobs run on CPU nodes
    return env | {key: os.environ[key] for key in env if key in os.environ}


def cluster_gpus() -> int:
    """GPUs of one node of the default partition (the `gpu` GRES), 0 without."""
    match = re.search(r"gpu(?::[\w.]+)?:(\d+)", " ".join(sinfo("%G")))
    return int(match.group(1)) if match else 0


def sacct(job_ids: list[str]) -> dict[str, dict]:
    fields = ["JobID", "State", "ReqMem", "Timelimit", "AllocCPUS", "ReqTRES", "AllocTRES"]
    fields += ["Start", "End", "Comment"]
    done = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-j", ",".join(job_ids), f"--format={','.join(fields)}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    rows = [dict(zip(fields, line.split("|"), strict=True)) for line in done.stdout.splitlines()]
    return {row["JobID"]: row for row in rows}


def records(results: Path) -> dict[Path, int]:
    return {path: path.stat().st_mtime_ns for path in results.glob("*/*/**/*.json")}


def run_to_the_end(command: list[str], cwd: Path, env: dict, timeout_s: float) -> tuple[int, str]:
    """(exit code, output) of a Snakemake run; past the timeout it gets Ctrl-C, so that it
    cancels its SLURM jobs instead of leaving them queued, and the test fails."""
    with subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=default_sigint,
    ) as run:
        try:
            output, _ = run.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            run.send_signal(signal.SIGINT)
            output, _ = run.communicate(timeout=180)
            pytest.fail(f"no end after {timeout_s:.0f} s; Ctrl-C sent:\n{output[-3000:]}")
    return run.returncode, output


@pytest.fixture(scope="module")
def resumed_run(tmp_path_factory):
    """config/ci.yaml under the profile, interrupted (Ctrl-C) once some records exist and jobs
    run, then resumed to the end. Returns the workdir, both logs and the records of part one."""
    workdir = copy_workflow(tmp_path_factory.mktemp("slurm-run"))
    env = dict(os.environ, **cluster_env())
    command = snakemake_command("--configfile", "config/ci.yaml", *FAST_STATUS)
    first_log = workdir / "first.log"
    calls = workdir / "slurm-calls.log"
    first_env = env | {"PATH": logged_slurm_tools(workdir / "bin", calls)}
    with first_log.open("w") as out:
        first = subprocess.Popen(
            command,
            cwd=workdir,
            env=first_env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=default_sigint,
        )
        started = time.monotonic()
        deadline = started + 600
        # Interrupted once some records exist, SLURM still holds a job of the run waiting for
        # the node (that job is certain to be cancelled, whereas a running one may end before
        # scancel reaches it: CI once interrupted a run whose jobs had all finished), and the
        # plugin is between two status queries (see between_status_queries; asked again last,
        # as squeue may take a while on a loaded machine).
        while first.poll() is None and time.monotonic() < deadline:
            if (
                between_status_queries(calls)
                and len(records(workdir / "results")) >= 4
                and pending_jobs(first_log.read_text())
                and between_status_queries(calls)
            ):
                break
            time.sleep(0.1)
        assert first.poll() is None, "the run ended before it could be interrupted"
        interrupted_after_s = time.monotonic() - started
        first.send_signal(signal.SIGINT)  # Snakemake cancels its SLURM jobs and stops
        first.wait(timeout=180)
    first_text = first_log.read_text()
    assert "Terminating processes on user request" in first_text, (
        f"Ctrl-C after {interrupted_after_s:.0f} s did not stop the run:\n{first_text[-3000:]}"
    )
    before = records(workdir / "results")
    second = run_to_the_end(command, workdir, env, timeout_s=RUN_TIMEOUT_S)
    return {
        "workdir": workdir,
        "first": first_text,
        "second": second[1],
        "returncode": second[0],
        "before": before,
        "scancel": [line for line in calls.read_text().splitlines() if "begin scancel" in line],
    }


def logged_slurm_tools(bin_dir: Path, calls: Path) -> str:
    """Wrappers of sacct, squeue and scancel that note in `calls` when each call begins and
    ends (scancel with its arguments); returns the PATH that puts them first."""
    bin_dir.mkdir()
    for tool in ("sacct", "squeue", "scancel"):
        wrapper = bin_dir / tool
        wrapper.write_text(
            "#!/bin/sh\n"
            f'echo "begin {tool} $*" >> "{calls}"\n'
            f'"{shutil.which(tool)}" "$@"\n'
            "status=$?\n"
            f'echo "end {tool}" >> "{calls}"\n'
            "exit $status\n"
        )
        wrapper.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


def between_status_queries(calls: Path, settle_s: float = 0.2, within_s: float = 1.0) -> bool:
    """Whether the plugin's last status query (sacct or squeue) ended settle_s to within_s ago
    and no other call runs. While the plugin checks its jobs' states it holds the list of them
    aside (snakemake-interface-executor-plugins, RemoteExecutor._wait_for_jobs), and a Ctrl-C
    then cancels nothing: the queued jobs run to the end after Snakemake has stopped (CI saw
    every job of part one COMPLETED). The next check begins at least 2 s after one ends."""
    if not calls.exists():
        return False
    lines = calls.read_text().splitlines()
    begun = sum(line.startswith("begin") for line in lines)
    ended = sum(line.startswith("end") for line in lines)
    since_s = time.time() - calls.stat().st_mtime
    return begun == ended > 0 and settle_s <= since_s < within_s


def submitted(log: str) -> dict[str, int]:
    """SLURM job id -> Snakemake job id, for every job a run submitted."""
    return {slurm: int(job) for job, slurm, _ in SUBMITTED.findall(log)}


def pending_jobs(log: str) -> list[str]:
    """The SLURM ids of the jobs a run submitted (its log says which) that wait in the queue."""
    ids = list(submitted(log))
    if not ids:
        return []
    done = subprocess.run(
        ["squeue", "-h", "-t", "PENDING", "-o", "%i", "-j", ",".join(ids)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.stdout.split()


@pytest.mark.slurm
def test_interrupted_run_resumes_to_a_complete_report(resumed_run):
    assert resumed_run["returncode"] == 0, resumed_run["second"][-5000:]
    results = resumed_run["workdir"] / "results"
    assert (results / "metrics.parquet").is_file()
    assert (results / "report" / "comparison.md").is_file()
    before = resumed_run["before"]
    assert before, "nothing was written before the interrupt"
    # What part one finished is kept, not measured again.
    assert all(path.stat().st_mtime_ns == stamp for path, stamp in before.items())
    first_jobs = submitted(resumed_run["first"])
    assert first_jobs and submitted(resumed_run["second"])
    # The interrupt left no job of part one queued or running.
    rows = sacct(list(first_jobs))
    states = {row["State"].split()[0] for row in rows.values()}
    assert states <= {"COMPLETED", "CANCELLED", "FAILED"}, rows
    assert resumed_run["scancel"], "Ctrl-C reached Snakemake but it called no scancel"
    assert "CANCELLED" in states, (resumed_run["scancel"], rows)


def accounted_jobs(resumed_run) -> list[tuple[dict, dict, str]]:
    """(Snakemake job block, sacct row, part) of every SLURM job of both parts of the run;
    each part numbers its Snakemake jobs afresh, so blocks pair with ids of their own log."""
    pairs = []
    for part in ("first", "second"):
        jobs, slurm_jobs = job_blocks(resumed_run[part]), submitted(resumed_run[part])
        rows = sacct(list(slurm_jobs))
        pairs += [(jobs[job_id], rows[slurm_id], part) for slurm_id, job_id in slurm_jobs.items()]
    return pairs


@pytest.mark.slurm
def test_sacct_shows_what_each_rule_asked_for(resumed_run):
    profile = yaml.safe_load((PROFILE / "config.yaml").read_text())
    exclusive = {
        rule
        for rule, resources in profile["set-resources"].items()
        if "--exclusive" in resources.get("slurm_extra", "")
    }
    node_cores = int(sinfo("%c")[0])
    completed_rules = set()
    for job, row, part in accounted_jobs(resumed_run):
        # Part two runs everything part one left to its end; part one's jobs were cut off.
        if part == "second":
            assert row["State"] == "COMPLETED", (job, row)
        assert row["Comment"].startswith(f"rule_{job['rule']}"), (job, row)
        assert row["ReqMem"] == f"{job['resources']['mem_mb']}M", (job, row)
        minutes = int(job["resources"]["runtime"])
        assert row["Timelimit"] == f"{minutes // 60:02d}:{minutes % 60:02d}:00", (job, row)
        asks_gpu = int(job["resources"].get("gpu", 0)) > 0
        assert ("gres/gpu" in row["ReqTRES"]) == asks_gpu, (job, row)
        if row["State"] != "COMPLETED":
            continue  # a job cancelled while it waited was never given CPUs
        completed_rules.add(job["rule"])
        if job["rule"] in exclusive:
            assert int(row["AllocCPUS"]) == node_cores, (job, row)  # a whole node
        else:
            assert int(row["AllocCPUS"]) == job["threads"], (job, row)
    # Which part ran which rule depends on the moment of the interrupt; both parts together
    # ran every kind of job.
    assert {"verify", "profile", "memory", "train", "aggregate", "report"} <= completed_rules


@pytest.mark.slurm
def test_cuda_jobs_get_a_gpu_and_wait_for_one(resumed_run):
    gpus = cluster_gpus()
    if gpus == 0:
        pytest.skip("the cluster has no `gpu` GRES (bash ci/slurm-start.sh --gpus 1 gives one)")
    log = resumed_run["first"] + resumed_run["second"]
    accounted = accounted_jobs(resumed_run)
    rows = {row["JobID"]: row for _, row, _ in accounted}
    cuda = [row for job, row, _ in accounted if job["wildcards"].get("device") == "cuda"]
    assert cuda, "config/ci.yaml has CUDA jobs"
    for row in cuda:  # asked for one GPU; given one if it started (not cancelled pending)
        assert "gres/gpu=1" in row["ReqTRES"], row
        assert "gres/gpu=1" in row["AllocTRES"] or row["Start"] in ("", "None", "Unknown"), row
    assert any(row["State"] == "COMPLETED" for row in cuda)
    # Every job holding a GPU (CUDA jobs, and whole-node jobs that take the node's GPUs too):
    # never more at once than the node has.
    holding = [
        (row["Start"], row["End"])
        for row in rows.values()
        if "gres/gpu" in row["AllocTRES"] and row["Start"] not in ("", "None", "Unknown")
    ]
    events = sorted([(start, 1) for start, _ in holding] + [(end, -1) for _, end in holding])
    in_use = most = 0
    for _, change in events:  # an end sorts before a start at the same second
        in_use += change
        most = max(most, in_use)
    assert 1 <= most <= gpus, log[-2000:]


@pytest.mark.slurm
def test_a_failing_job_stops_snakemake_with_slurms_reason(tmp_path):
    """A job given 50 MB: SLURM's accounting kills it for exceeding its memory, Snakemake
    exits non-zero and names the SLURM status; the job's SLURM log has SLURM's reason."""
    workdir = copy_workflow(tmp_path)
    command = snakemake_command(
        "--configfile",
        "config/ci.yaml",
        *FAST_STATUS,
        "--set-resources",
        "dataset:mem_mb=50",
        "--",
        "results/ci/datasets/adding.npz",
    )
    returncode, log = run_to_the_end(command, workdir, dict(os.environ, **cluster_env()), 600)
    assert returncode != 0, log[-3000:]
    failure = re.search(r"SLURM-job '(\d+)' failed, SLURM status is: '(\w+)'", log)
    assert failure and failure.group(2) in {"FAILED", "OUT_OF_MEMORY"}, log[-3000:]
    slurm_log = Path(SUBMITTED.search(log).group(3))
    assert "exceeded memory limit" in slurm_log.read_text()
    assert not (workdir / "results" / "ci" / "datasets" / "adding.npz").exists()
