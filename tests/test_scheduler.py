"""workflow/rules/scheduler.smk: while a local job runs, Snakemake's scheduler stays asleep
(its job rate limiter would otherwise run a scheduling round every second on the cores a
timing job measures on)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
JOBS = 3
JOB_SECONDS = 3

SNAKEFILE = f"""
rule all:
    input: expand("out/{{i}}.txt", i=range({JOBS}))

rule busy:
    output: "out/{{i}}.txt"
    threads: workflow.cores
    shell: "sleep {JOB_SECONDS} && touch {{output}}"
"""


def scheduling_rounds(workdir: Path, include_scheduler: bool) -> int:
    """Scheduling rounds in a --verbose local run of JOBS jobs that each hold every core."""
    include = f'include: "{REPO / "workflow/rules/scheduler.smk"}"\n' if include_scheduler else ""
    (workdir / "Snakefile").write_text(include + SNAKEFILE)
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "2", "--verbose"],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(list((workdir / "out").iterdir())) == JOBS
    return len(re.findall(r"^Ready jobs: \d+$", done.stderr, re.M))


def test_scheduler_sleeps_while_a_local_job_runs(tmp_path):
    quiet = tmp_path / "quiet"
    limited = tmp_path / "limited"
    quiet.mkdir()
    limited.mkdir()
    # A round at the start and one as each job ends (the last one starts `all`).
    assert scheduling_rounds(quiet, include_scheduler=True) <= JOBS + 1
    # Without it Snakemake also wakes once a second while a job runs and another waits (the
    # first JOBS - 1 jobs): the count above tells the two apart.
    assert scheduling_rounds(limited, include_scheduler=False) >= JOBS + 1 + (JOBS - 1) * (
        JOB_SECONDS - 1
    )
