"""`rnnopt topup results/<run>`: more processes for the verdicts that the run could not decide.

A speed verdict is inconclusive when its interval crosses the threshold
(rnnopt.report.undecided). Step by step, the undecided verdict cheapest to decide (the
processes its interval says it still needs, times the seconds a step takes) gets one more
process of each profile job it rests on (the same command as the workflow's profile job, but
the GEMM-only split), then the verdicts are judged again: a verdict drops out once its interval
clears the threshold, or its jobs reach --max-processes. Any speed verdict, decided, held
open by the host's between-run spread or beyond budget, also gets a process in place of each
one that a slow spell of the host took from its jobs (rnnopt.report.wide.undisturbed), so
that its interval rests on the processes the passes gave it (Plan.priority: an undecided
verdict's with the steps the budget can decide, cheapest first; a decided one's after them).
No step starts that its jobs' cost (their last process, or their timing loop plus the
start-up seen so far) says would not fit in what is left of --budget-s. The records go to
results/<run>/topup/, read with the run's profile records (process numbers after the base
passes). docs/intervals.md ("Undecided verdicts") gives the rule and its cost to the
intervals.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from statistics import median

from rnnopt.cli.common import (
    add_verdict_arguments,
    non_negative_float,
    positive_int,
    verdict_settings,
)
from rnnopt.errors import UserError

TOPUP = "topup"  # results/<run>/topup/: one of rnnopt.report.aggregate.PROFILE_STAGES


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "topup", help="time undecided verdicts' jobs in more processes", description=__doc__
    )
    parser.add_argument("run_dir", metavar="RUN", help="the run's folder: results/<run>/")
    parser.add_argument(
        "--budget-s",
        type=non_negative_float,
        default=45.0,
        help="seconds of extra processes at most: none starts that would not fit (default 45)",
    )
    parser.add_argument(
        "--max-processes",
        type=positive_int,
        default=20,
        help="processes a job reaches at most, its base passes included (default 20)",
    )
    add_verdict_arguments(parser)
    parser.set_defaults(func=run)


def profile_command(config: dict, process: int, out_folder: Path) -> list[str]:
    """The profile command of one more process of the job whose record config is `config`:
    its flags (the spell log's too: a top-up process waits out a slow spell as the passes'
    did, from the same run's budget), but --process, --out and no GEMM-only split (the
    verdict needs the step)."""
    command = [sys.executable, "-m", "rnnopt", "--isolate", "profile"]
    for flag in ("variant", "dtype", "device", "batch", "seq_len", "input_size", "hidden_size"):
        command += [f"--{flag.replace('_', '-')}", str(config[flag])]
    command += ["--phase", "forward", "backward", "step", "--threads", str(config["threads"])]
    command += ["--seed", str(config["seed"]), "--process", str(process)]
    for flag in ("min_time_s", "min_calls", "max_warmup_calls"):
        command += [f"--{flag.replace('_', '-')}", str(config[flag])]
    command += ["--split-phases"]
    if config.get("spell_log"):
        command += ["--spell-log", str(config["spell_log"])]
        command += ["--spell-wait-s", str(config["spell_wait_s"])]
        command += ["--spell-budget-s", str(config["spell_budget_s"])]
    if config.get("peak"):
        command += ["--peak", str(config["peak"])]
    if config.get("native_only"):
        command.append("--native-only")
    name = f"{{phase}}-threads{config['threads']}-p{process}.json"
    return [*command, "--out", str(out_folder / name)]


class Run:
    """One run's records, read once and grown by the records each new process writes."""

    def __init__(self, run_dir: Path) -> None:
        from rnnopt.report.aggregate import collect, record_paths

        if not (run_dir / "profile").is_dir():
            raise UserError(f"{run_dir}: no profile/ folder in it (expected results/<run>/)")
        self.results, self.name = run_dir.parent, run_dir.name
        self.folder = run_dir / TOPUP
        self._collect = collect
        self.metrics = collect(self.results, record_paths(self.results, self.name))[0]
        self._counts = None

    def add(self, paths: list[Path]) -> None:
        import pandas as pd

        new = self._collect(self.results, paths)[0]
        self.metrics = pd.concat([self.metrics, new], ignore_index=True)
        self._counts = None

    def _rows(self, job: tuple):
        from rnnopt.report.outcomes import JOB_KEYS

        frame = self.metrics[self.metrics["kind"] == "profile"]
        for key, value in zip(JOB_KEYS, job, strict=True):
            frame = frame[frame[key] == value]
        return frame

    def processes(self, job: tuple) -> int:
        """Processes of the job with a record, any status."""
        return self._rows(job)["process"].nunique()

    def short(self, job: tuple) -> bool:
        """Whether the job has fewer ok processes that no slow spell disturbed
        (rnnopt.report.wide.clean: those the report left out, and those it kept only to keep
        two) than ok processes of the workflow's passes (a process that failed is no spell's
        doing: not given back)."""
        if self._counts is None:
            self._counts = self._ok_processes()
        kept, passes = self._counts
        return kept.get(job, 0) < passes.get(job, 0)

    def _ok_processes(self) -> tuple[dict, dict]:
        """Per job, its ok processes that no spell disturbed, and its ok processes of the
        passes (records under profile/): counted once per state of the records, not per job."""
        from rnnopt.report.outcomes import JOB_KEYS
        from rnnopt.report.wide import clean, records

        rows = records(self.metrics, "profile", per_process=True)
        rows = rows[rows["status"] == "ok"]
        kept = clean(rows)
        passes = rows[rows["source"].str.startswith(f"{self.name}/profile/")]
        return tuple(
            frame.groupby(list(JOB_KEYS))["process"].nunique().to_dict() for frame in (kept, passes)
        )

    def next_process(self, job: tuple) -> int:
        return int(self._rows(job)["process"].max()) + 1

    def loop_seconds(self, job: tuple) -> float:
        """Seconds of the timing loop of the job's last process (its step record's
        contention.wall_s): the cost of a process, but its start-up."""
        rows = self._rows(job)
        loops = rows[(rows["phase"] == "step") & (rows["metric"] == "contention.wall_s")]
        return float(loops.sort_values("process")["value"].iloc[-1]) if len(loops) else 0.0

    def base(self, job: tuple) -> tuple[dict, Path]:
        """The record config of the job's first process (the flags every process shares) and
        the folder of its top-up records: the base records' folder under topup/ instead of
        profile/."""
        rows = self._rows(job)
        steps = rows[rows["phase"] == "step"].sort_values("process")
        source = self.results / steps["source"].iloc[0]
        folder = source.parent.relative_to(self.results / self.name / "profile")
        return json.loads(source.read_text())["config"], self.folder / folder


def measure_one(run: Run, job: tuple) -> None:
    """Time the job in one more process; its records join the run."""
    process = run.next_process(job)
    config, out_folder = run.base(job)
    command = profile_command(config, process, out_folder)
    status = subprocess.run(command, check=False).returncode
    if status != 0:
        raise UserError(f"profile process {process} of {out_folder} exited {status}")
    run.add(sorted(out_folder.glob(f"*-p{process}.json")))


@dataclass(frozen=True)
class Plan:
    """What deciding an undecided verdict would take if its estimate and spread stayed: `steps`
    more processes of each of its jobs (rnnopt.report.intervals.processes_to_decide), at
    `step_s` seconds a step; `spent_s`, the seconds its steps have taken so far."""

    row: object  # rnnopt.report.undecided.Undecided
    jobs: list[tuple]
    steps: int | None  # None: more than the process cap
    step_s: float
    spent_s: float
    replaces: bool = False  # the step only gives back processes a slow spell took
    undecided: bool = True  # the verdict's interval crosses the threshold

    @property
    def cost_s(self) -> float:
        return math.inf if self.steps is None else self.steps * self.step_s

    def priority(self, left_s: float) -> tuple[int, float, float]:
        """What goes first: steps of verdicts projected to be decided within the seconds
        left and the processes given back to undecided verdicts that a slow spell left short
        (a spell-hit process may be all that keeps one open, and giving it back restores the
        passes' processes), cheapest first; then the processes given back to decided verdicts
        (only a narrower interval); then the verdicts that neither the budget nor the cap
        would decide, the one with the fewest seconds so far first."""
        if self.replaces:
            return (0 if self.undecided else 2), self.cost_s, self.spent_s
        return (0 if self.cost_s <= left_s else 3), self.cost_s, self.spent_s

    @property
    def projected(self) -> str:
        if self.replaces:
            return "replacing processes left out for a slow spell"
        return "beyond the cap" if self.steps is None else f"{self.steps} more a side"


class Costs:
    """Seconds a process of each job takes: what its last top-up process took, else its last
    process's timing loop (Run.loop_seconds) plus the start-up seen so far (the median, over
    top-up processes, of their seconds beyond their timing loop: imports, data, compiles)."""

    def __init__(self, run: Run) -> None:
        self.run, self.measured, self.start_ups = run, {}, []

    def of(self, job: tuple) -> float:
        if job in self.measured:
            return self.measured[job]
        return self.run.loop_seconds(job) + (median(self.start_ups) if self.start_ups else 0.0)

    def add(self, job: tuple, seconds: float) -> None:
        self.measured[job] = seconds
        self.start_ups.append(max(0.0, seconds - self.run.loop_seconds(job)))


def runnable(run: Run, jobs: list, most: int, has_device) -> tuple[list[str], list]:
    """The devices `jobs` need that this host lacks, and the jobs that one more process can
    go to here: on a device this host has, below `most` processes."""
    from rnnopt.report.outcomes import JOB_KEYS

    where = JOB_KEYS.index("device")
    missing = sorted({job[where] for job in jobs if not has_device(job[where])})
    here = [job for job in jobs if has_device(job[where]) and run.processes(job) < most]
    return missing, here


def plan(run: Run, row, settings: dict, costs: Costs, spent: dict, has_device) -> Plan | str:
    """The plan of one undecided verdict, or why it can have no step: its jobs are at the
    process cap, need a device this host lacks (a CUDA verdict's top-up on a CPU node), it is
    read over the host's reference runs (intervals.with_reference), or the host's between-run
    spread alone keeps its interval across the threshold."""
    from rnnopt.report.intervals import processes_to_decide, run_spread_keeps_open

    missing, jobs = runnable(run, row.jobs, settings["max_processes"], has_device)
    if missing:
        return f"its jobs need a {', '.join(missing)} device, which this host lacks"
    most = settings["max_processes"]
    if not jobs:
        return f"its jobs have {most} processes (the cap)"
    rule = (settings["threshold"], settings["confidence"])
    if row.speedup.reads_reference:
        return (
            f"it is read over this host's {row.speedup.reference_runs} reference runs "
            "(--rerun-spread), which this run's processes barely move"
        )
    if run_spread_keeps_open(row.speedup, *rule):
        return (
            f"the host's between-run spread ({row.speedup.run_sd:.1%}, --rerun-spread) keeps "
            "it across the threshold however many processes this run adds"
        )
    need = processes_to_decide(row.speedup, *rule, most)
    steps = None if need is None else max(1, need - row.speedup.n)
    step_s = sum(costs.of(job) for job in jobs)
    return Plan(row, jobs, steps, step_s, spent.get(row.key, 0.0))


def replacement(
    run: Run, row, undecided: bool, costs: Costs, spent: dict, settings: dict, has_device
):
    """A step that gives the verdict's jobs a process in place of each one a slow spell took
    (Run.short), or None when none is short. A decided verdict, one the between-run spread
    keeps open, or one no budget would decide gets no other step (before the budget runs
    out); but its interval should rest on the processes the passes gave it: with two
    processes a side instead of three, a 95% interval's t quantile grows from 2.8 to 4.3
    (12.7 at one degree of freedom), and a decided verdict can read 2.04-21.84 (run K's
    batching, 6.67x). A row with no interval (a figure-only sweep: one process a job by
    design) is judged by none, so a process given back would change nothing it says: a fresh
    run spent 9 of its 30 s on three such steps while torch.compile's verdict, open, waited
    for its spell-hit process."""
    if not row.speedup.has_interval:
        return None
    _, jobs = runnable(run, row.jobs, settings["max_processes"], has_device)
    short = [job for job in jobs if run.short(job)]
    if not short:
        return None
    step_s = sum(costs.of(job) for job in short)
    spent_s = spent.get(row.key, 0.0)
    return Plan(row, short, 1, step_s, spent_s, replaces=True, undecided=undecided)


@cache
def device_here(device: str) -> bool:
    """Whether this host can run a job on `device` (cpu, or cuda without importing torch on a
    host with no GPU driver)."""
    if device != "cuda":
        return True
    from rnnopt.models.variants import cuda_available

    return cuda_available()


def topup(
    run: Run,
    budget_s: float,
    max_processes: int,
    threshold: float,
    confidence: float,
    spread: dict | None = None,
    measure=measure_one,
    clock=time.monotonic,
    has_device=device_here,
    start: float | None = None,
) -> list:
    """Steps of one more process per job of an undecided verdict (or, for any speed verdict,
    per job that a slow spell left short: `replacement`), until none is undecided or short,
    their jobs reach max_processes, or no next step fits in what is left of the budget; the
    verdicts still undecided.

    Each step goes to the verdict with the lowest projected cost of deciding (its plan: steps
    still needed times the seconds a step takes), so a nearly decided verdict of cheap jobs
    is not kept waiting by one that sits on the threshold; verdicts that the cap would not
    decide either go last, the one with the fewest seconds so far first. The projection only
    orders the steps: from three processes it is too unsure to leave a verdict out (a slow
    spell in one process makes a clear 1.1x look out of reach; docs/intervals.md). The budget
    counts from `start` (the command's start: reading the run's records and judging its
    verdicts are part of what the top-up costs the run), else from now."""
    from rnnopt.report.undecided import speed_verdicts

    start = clock() if start is None else start
    costs, spent = Costs(run), {}
    settings = {"max_processes": max_processes, "threshold": threshold, "confidence": confidence}
    while True:
        verdicts = speed_verdicts(run.metrics, threshold, confidence, spread)
        open_ = [row for row, undecided in verdicts if undecided]
        plans = [plan(run, row, settings, costs, spent, has_device) for row in open_]
        # Every verdict, open or decided, may get back processes a spell took; an open one
        # whose own step is beyond budget or cap still gets them (its interval rests on them).
        replacing = [
            replacement(run, row, open_row, costs, spent, settings, has_device)
            for row, open_row in verdicts
        ]
        steps = [p for p in plans + replacing if isinstance(p, Plan)]
        if not open_ and not steps:
            print("nothing left to decide; undecided: 0")
            return open_
        left = budget_s - (clock() - start)
        fitting = [p for p in steps if p.step_s <= left]
        if not fitting:
            print(f"no step fits in the {max(left, 0):.0f} s left; undecided: {len(open_)}")
            for row, found in zip(open_, plans, strict=True):
                print(f"  {row}: {why_left(found)}")
            return open_
        chosen = min(fitting, key=lambda p: p.priority(left))
        for job in chosen.jobs:
            began = clock()
            measure(run, job)
            costs.add(job, clock() - began)
            spent[chosen.row.key] = spent.get(chosen.row.key, 0.0) + costs.measured[job]
        print(f"+1 process of {len(chosen.jobs)} jobs for {chosen.row} ({chosen.projected})")


def why_left(found: Plan | str) -> str:
    if isinstance(found, str):
        return found
    return f"next step about {found.step_s:.0f} s; projected to decide: {found.projected}"


def run(args) -> int:
    threshold, confidence, spread = verdict_settings(args)
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise UserError(f"{run_dir}: no such folder")
    started = time.monotonic()
    records = Run(run_dir)
    try:
        records.folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UserError(f"{records.folder}: cannot write ({error.strerror or error})") from None
    left = topup(
        records, args.budget_s, args.max_processes, threshold, confidence, spread, start=started
    )
    print(f"rnnopt topup: {time.monotonic() - started:.0f} s; {len(left)} verdicts undecided")
    return 0
