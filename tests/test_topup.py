"""`rnnopt topup`: which verdicts are undecided, and the steps that add processes to their jobs
until they are decided, capped or out of budget (records written in tmp_path; the profile
process replaced by a writer of chosen times, but in the command test)."""

from __future__ import annotations

import dataclasses
import itertools
import math
from pathlib import Path

import numpy as np
from scipy import stats

from rnnopt.cli import main
from rnnopt.cli.topup import Costs, Run, profile_command, replacement, topup
from rnnopt.records import make_record, write_record
from rnnopt.report.intervals import Interval, classify, ratio_interval
from rnnopt.report.rerun_spread import PairSpread
from rnnopt.report.undecided import speed_verdicts, undecided
from rnnopt.report.wide import records
from tests.test_aggregate import ENV, FakeVariant

RUN = "cpu-x"
SHAPE = {"batch": 16, "seq_len": 20, "input_size": 32, "hidden_size": 64}
JIT = ("torch-lstm-jit", "float32", "cpu", 16, 20, 32, 64, 1)
CELL = ("torch-lstm-cell", "float32", "cpu", 16, 20, 32, 64, 1)
NN = ("torch-lstm-nn", "float32", "cpu", 16, 20, 32, 64, 1)
CONFIG = {
    "variant": "torch-lstm-jit",
    "dtype": "float32",
    "device": "cpu",
    "batch": 16,
    "seq_len": 20,
    "input_size": 32,
    "hidden_size": 64,
    "threads": 1,
    "seed": 0,
    "min_time_s": 0.3,
    "min_calls": 5,
    "max_warmup_calls": 4,
    "split_phases": ["forward"],
    "peak": "results/cpu-x/peak/threads1.json",
    "native_only": False,
}


def job_folder(job: tuple) -> str:
    """<variant>/<device>-<dtype>/b..-t..-i..-h..: the profile rule's folder of a job."""
    variant, dtype, device, batch, seq_len, input_size, hidden_size, _ = job
    return f"{variant}/{device}-{dtype}/b{batch}-t{seq_len}-i{input_size}-h{hidden_size}"


def write_process(
    root, job, process, time_ms, stage="profile", loop_s=1.0, probe_ms=1.0, status="ok"
):
    """The step record of one process of `job`, every call taking time_ms, its timing loop
    loop_s seconds, both its speed probes probe_ms."""
    variant, dtype, device = job[0], job[1], job[2]
    relative = f"{job_folder(job)}/step-threads1-p{process}.json"
    time = {"median": time_ms, "iqr": 0.0, "min": time_ms, "mean": time_ms, "n": 5}
    probes = {"probe_before_ms": probe_ms, "probe_after_ms": probe_ms}
    metrics = {
        "time_ms": time,
        "samples_ms": [time_ms] * 5,
        "contention": {"wall_s": loop_s, **probes},
    }
    record = make_record(
        "profile",
        seed=0,
        config=CONFIG | {"variant": variant, "dtype": dtype, "device": device, "process": process},
        metrics=metrics if status == "ok" else None,
        status=status,
        reason=None if status == "ok" else "MemoryError: out of memory",
        variant=FakeVariant(variant, dtype, device),
        env=ENV,
        phase="step",
        shape=SHAPE,
        threads=1,
        process=process,
    )
    write_record(root / RUN / stage / relative, record)


def base_run(root, jit_ms=(9.0, 9.4, 9.2), cell_ms=(10.0, 10.2, 9.8)) -> Run:
    """TorchScript undecided (1.09x (1.04-1.14): two more processes a side would decide it if
    the spread stayed), nn.LSTM decided (3.4x)."""
    for process, (jit, cell) in enumerate(zip(jit_ms, cell_ms, strict=True)):
        write_process(root, JIT, process, jit)
        write_process(root, CELL, process, cell)
        write_process(root, NN, process, 3.0 + 0.01 * process)
    return Run(root / RUN)


def writer(times: dict):
    """A measure step: the job's next process, at the next of its times."""
    calls = []

    def measure(run: Run, job: tuple) -> None:
        process = run.next_process(job)
        write_process(run.results, job, process, next(times[job]), stage="topup", loop_s=0.0)
        calls.append((job, process))
        run.add(sorted((run.folder / job_folder(job)).glob(f"*-p{process}.json")))

    return measure, calls


def test_only_the_verdict_whose_interval_crosses_the_threshold_is_undecided(tmp_path):
    run = base_run(tmp_path)
    found = undecided(run.metrics)
    assert [(row.optimisation, row.run) for row in found] == [("TorchScript", RUN)]
    assert set(found[0].jobs) == {JIT, CELL}
    assert found[0].speedup.low < 1.05 < found[0].speedup.high


def test_processes_are_added_until_the_verdict_is_decided(tmp_path, capsys):
    run = base_run(tmp_path)
    steady = {JIT: itertools.cycle([9.0, 9.02]), CELL: itertools.cycle([10.0, 10.03])}
    measure, calls = writer(steady)
    left = topup(run, 60, 20, 0.05, 0.95, measure=measure)
    assert left == []
    # one more process of each side per step, numbered after the base passes
    jobs = [job for job, _ in calls]
    assert jobs.count(JIT) == jobs.count(CELL) >= 1 and NN not in jobs
    assert sorted(p for job, p in calls if job == JIT) == list(range(3, 3 + jobs.count(JIT)))
    assert (tmp_path / RUN / "topup" / job_folder(JIT) / "step-threads1-p3.json").is_file()
    assert undecided(run.metrics) == []
    assert "nothing left to decide; undecided: 0" in capsys.readouterr().out


def test_a_verdict_that_stays_undecided_stops_at_the_process_cap(tmp_path, capsys):
    run = base_run(tmp_path)
    wide = {JIT: itertools.cycle([8.6, 9.8]), CELL: itertools.cycle([9.6, 10.6])}
    measure, calls = writer(wide)
    left = topup(run, 600, 6, 0.05, 0.95, measure=measure)
    assert [row.optimisation for row in left] == ["TorchScript"]
    assert run.processes(JIT) == run.processes(CELL) == 6 and len(calls) == 6
    assert "its jobs have 6 processes (the cap)" in capsys.readouterr().out


def test_no_process_starts_that_the_budget_cannot_hold(tmp_path, capsys):
    """Base processes with 10 s timing loops: a step (a process a side) is estimated at 20 s
    before the first, and known after it (12 s a process here)."""
    for process, (jit, cell) in enumerate(zip((9.0, 9.4, 9.2), (10.0, 10.2, 9.8), strict=True)):
        write_process(tmp_path, JIT, process, jit, loop_s=10.0)
        write_process(tmp_path, CELL, process, cell, loop_s=10.0)
    run = Run(tmp_path / RUN)
    measure, calls = writer({JIT: itertools.repeat(9.5), CELL: itertools.repeat(9.9)})
    now = [0.0]

    def slow(run, job):
        measure(run, job)
        now[0] += 12.0

    topup(run, 19, 20, 0.05, 0.95, measure=slow, clock=lambda: now[0])
    assert calls == []
    assert "no step fits in the 19 s left" in capsys.readouterr().out
    # the budget counts from the command's start: 10 s spent reading and judging the run
    topup(run, 29, 20, 0.05, 0.95, measure=slow, clock=lambda: now[0], start=now[0] - 10.0)
    assert calls == []
    assert "no step fits in the 19 s left" in capsys.readouterr().out
    topup(run, 47, 20, 0.05, 0.95, measure=slow, clock=lambda: now[0])
    assert len(calls) == 2  # one step of 24 s; a second, now known to cost 24 s, would not fit
    out = capsys.readouterr().out
    assert "no step fits in the 23 s left; undecided: 1" in out
    assert "next step about 24 s; projected to decide: 4 more a side" in out


def test_the_verdict_cheapest_to_decide_goes_first(tmp_path):
    """Two undecided verdicts, each two steps from decided: nn.LSTM vs cell, whose processes
    are cheaper, is decided before TorchScript gets its first process."""
    for process, (jit, cell, nn) in enumerate(
        zip((9.0, 9.4, 9.2), (10.0, 10.2, 9.8), (9.0, 9.4, 9.2), strict=True)
    ):
        write_process(tmp_path, JIT, process, jit, loop_s=5.0)
        write_process(tmp_path, CELL, process, cell, loop_s=1.0)
        write_process(tmp_path, NN, process, nn, loop_s=1.0)
    run = Run(tmp_path / RUN)
    assert len(undecided(run.metrics)) == 2
    times = {job: itertools.cycle([9.15, 9.2]) for job in (JIT, NN)}
    times[CELL] = itertools.cycle([10.0, 10.05])
    measure, calls = writer(times)
    topup(run, 600, 20, 0.05, 0.95, measure=measure)
    jobs = [job for job, _ in calls]
    assert JIT in jobs and NN in jobs
    assert max(i for i, job in enumerate(jobs) if job == NN) < jobs.index(JIT)


def test_a_verdict_on_the_threshold_waits_for_the_others(tmp_path):
    """nn.LSTM vs cell at 1.05x, which no number of processes decides, gets its steps only
    once TorchScript, two steps from decided, is decided."""
    run = base_run(tmp_path)
    for process, cell_ms in enumerate((10.0, 10.2, 9.8)):
        write_process(tmp_path, NN, process, cell_ms / 1.05)
    run = Run(tmp_path / RUN)
    assert {row.optimisation for row in undecided(run.metrics)} == {
        "TorchScript",
        "library kernels (nn.LSTM vs hand-written cell)",
    }
    times = {JIT: itertools.cycle([9.15, 9.2]), CELL: itertools.cycle([10.0, 10.05])}
    times[NN] = itertools.cycle([9.5, 9.6])
    measure, calls = writer(times)
    topup(run, 600, 8, 0.05, 0.95, measure=measure)
    jobs = [job for job, _ in calls]
    assert JIT in jobs and NN in jobs
    assert max(i for i, job in enumerate(jobs) if job == JIT) < jobs.index(NN)


def test_a_verdict_on_a_device_the_host_lacks_gets_no_process(tmp_path, capsys):
    """A CUDA verdict undecided in the run's records, topped up on a host without CUDA (a CPU
    node of a cluster): its processes would be recorded skipped, so it gets none, and the
    CPU verdict is still decided."""
    base_run(tmp_path)
    cuda_nn, cuda_cell = (job[:2] + ("cuda",) + job[3:] for job in (NN, CELL))
    for process, (nn, cell) in enumerate(zip((9.0, 9.4, 9.2), (10.0, 10.2, 9.8), strict=True)):
        write_process(tmp_path, cuda_nn, process, nn)  # cuDNN vs cell loop: 1.09x, undecided
        write_process(tmp_path, cuda_cell, process, cell)
    run = Run(tmp_path / RUN)
    assert len(undecided(run.metrics)) == 2
    times = {JIT: itertools.cycle([9.15, 9.2]), CELL: itertools.cycle([10.0, 10.05])}
    measure, calls = writer(times)
    left = topup(run, 600, 20, 0.05, 0.95, measure=measure, has_device=lambda d: d == "cpu")
    assert {job for job, _ in calls} == {JIT, CELL}
    assert [row.speedup.n for row in left] == [3]
    assert "its jobs need a cuda device, which this host lacks" in capsys.readouterr().out


def test_the_command_repeats_the_base_process_flags_but_the_split():
    out = Path("results/cpu-x/topup/torch-lstm-jit")
    command = profile_command(CONFIG | {"native_only": True}, 7, out)
    text = " ".join(command[1:])
    assert text.startswith("-m rnnopt --isolate profile --variant torch-lstm-jit --dtype float32")
    assert "--phase forward backward step --threads 1 --seed 0 --process 7" in text
    assert "--min-time-s 0.3 --min-calls 5 --max-warmup-calls 4 --split-phases --peak " in text
    assert command[-3:] == ["--native-only", "--out", str(out / "{phase}-threads1-p7.json")]
    spelled = CONFIG | {"spell_log": "results/cpu-x/spells.log", "spell_wait_s": 5.0}
    text = " ".join(profile_command(spelled | {"spell_budget_s": 40.0}, 7, out))
    assert "--spell-log results/cpu-x/spells.log --spell-wait-s 5.0 --spell-budget-s 40.0" in text


def test_a_folder_without_a_run_is_one_line(tmp_path, capsys):
    assert main(["topup", str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err.strip().endswith("missing: no such folder")
    assert main(["topup", str(tmp_path)]) == 2
    assert "no profile/ folder in it" in capsys.readouterr().err


def test_sequential_top_up_keeps_the_interval_near_its_nominal_coverage():
    """The top-up's rule on synthetic runs with known between-process drift: 3 processes a
    side, one more a side while the verdict is inconclusive, up to 20. Stopping on the data
    costs some coverage (docs/intervals.md); over speedups near and away from the threshold
    the final interval still covers the truth in at least 93% of runs."""
    rng = np.random.default_rng(7)
    covered = runs = 0
    for true in (1.0, 1.03, 1.066, 1.10, 1.2):
        for _ in range(300):
            drift = rng.normal(0, 0.015, 40)  # each process's own speed, 1.5% between them
            base = list(10.0 * np.exp(drift[:3]))
            cand = list(10.0 / true * np.exp(drift[20:23]))
            found = ratio_interval(base, cand)
            while classify(found) == "inconclusive" and len(base) < 20:
                base.append(10.0 * math.exp(drift[len(base)]))
                cand.append(10.0 / true * math.exp(drift[20 + len(cand)]))
                found = ratio_interval(base, cand)
            covered += found.low <= true <= found.high
            runs += 1
    assert covered / runs >= 0.93
    assert stats.binomtest(covered, runs, 0.95).pvalue > 1e-6  # near nominal, not far below


def test_a_verdict_the_between_run_spread_keeps_open_gets_no_process(tmp_path, capsys):
    """TorchScript at 1.075x with three processes that agree to 0.2% (its own interval
    1.07-1.08x), on a host whose runs move it by 2% (measured over 7 runs): even infinitely
    many processes leave t(6) x 2% = 4.9% of half-width, past the 2.4% to the 5% bound, at any
    value its processes allow, so the top-up leaves it; with a 0.2% spread the interval of
    three processes that spread 2% (1.09x (1.04-1.14)) gets processes and is decided."""
    pair = (
        "torch-lstm-jit float32 cpu b16-t20-i32-h64 threads1",
        "torch-lstm-cell float32 cpu b16-t20-i32-h64 threads1",
    )
    steady = {JIT: itertools.cycle([9.0, 9.02]), CELL: itertools.cycle([10.0, 10.03])}
    run = base_run(tmp_path / "wide", jit_ms=(9.3, 9.32, 9.31), cell_ms=(10.0, 10.02, 10.01))
    measure, calls = writer(steady)
    left = topup(
        run, 600, 20, 0.05, 0.95, {RUN: {pair: PairSpread(0.02, 6.0, {})}}, measure=measure
    )
    assert calls == [] and [row.optimisation for row in left] == ["TorchScript"]
    assert left[0].speedup.run_sd == 0.02
    assert (
        "the host's between-run spread (2.0%, --rerun-spread) keeps it" in capsys.readouterr().out
    )
    run = base_run(tmp_path / "narrow")
    measure, calls = writer(steady)
    assert (
        topup(run, 600, 20, 0.05, 0.95, {RUN: {pair: PairSpread(0.002, 6.0, {})}}, measure=measure)
        == []
    )
    assert calls


def test_a_verdict_read_over_the_reference_runs_gets_no_process(tmp_path, capsys):
    """base_run's TorchScript, 1.09x (1.04-1.14), on a host whose seven reference runs pooled
    measure 1.05x (1.02-1.08), which this run agrees with: the verdict reads that pooled
    interval, undecided, and more processes of this run would barely move it (one run among
    eight), so the top-up adds none. With a 0.2% spread alone (no pooled speedup) it adds
    processes (test_a_verdict_the_between_run_spread_keeps_open_gets_no_process)."""
    pair = (
        "torch-lstm-jit float32 cpu b16-t20-i32-h64 threads1",
        "torch-lstm-cell float32 cpu b16-t20-i32-h64 threads1",
    )
    run = base_run(tmp_path)
    spread = {RUN: {pair: PairSpread(0.002, 6.0, {}, math.log(1.05), 0.01)}}
    [row] = undecided(run.metrics, spread=spread)
    assert row.speedup.agrees and row.speedup.judged is row.speedup.reference
    measure, calls = writer({JIT: itertools.cycle([9.0]), CELL: itertools.cycle([10.0])})
    left = topup(run, 600, 20, 0.05, 0.95, spread, measure=measure)
    assert calls == [] and [r.optimisation for r in left] == ["TorchScript"]
    assert "it is read over this host's 7 reference runs" in capsys.readouterr().out


def test_a_slow_process_that_pulls_the_estimate_to_the_bound_does_not_keep_it_open(
    tmp_path, capsys
):
    """Run AQ's TorchScript: one of three jit processes 10% slower than the other two, its
    probes normal (so it stays in), puts the estimate at 1.077x, where the host's 2% spread
    alone would keep a verdict open. But the processes' own interval reaches far beyond that
    estimate, so more processes can move it: the top-up adds them (the rule judged at the
    estimate added none) and they decide it."""
    pair = (
        "torch-lstm-jit float32 cpu b16-t20-i32-h64 threads1",
        "torch-lstm-cell float32 cpu b16-t20-i32-h64 threads1",
    )
    run = base_run(tmp_path, jit_ms=(9.0, 9.9, 9.02), cell_ms=(10.0, 10.02, 10.01))
    spread = {RUN: {pair: PairSpread(0.02, 6.0, {})}}
    assert round(undecided(run.metrics, spread=spread)[0].speedup.median, 3) == 1.077
    measure, calls = writer({JIT: itertools.cycle([9.0, 9.02]), CELL: itertools.cycle([10.01])})
    assert topup(run, 600, 20, 0.05, 0.95, spread, measure=measure) == []
    assert calls
    assert "keeps it across the threshold" not in capsys.readouterr().out


def test_a_process_a_slow_spell_took_is_replaced_even_where_the_spread_keeps_it_open(
    tmp_path, capsys
):
    """TorchScript's process 1 timed during a slow spell (both probes 1.5x the run's usual):
    the report leaves it out, and the interval would rest on two processes against three. The
    spread keeps the verdict open, so the top-up adds no process to decide it, but it gives
    TorchScript's job one in place of the lost one, and the cell loop's job none."""
    pair = (
        "torch-lstm-jit float32 cpu b16-t20-i32-h64 threads1",
        "torch-lstm-cell float32 cpu b16-t20-i32-h64 threads1",
    )
    run = base_run(tmp_path, jit_ms=(9.3, 9.32, 9.31), cell_ms=(10.0, 10.02, 10.01))
    write_process(tmp_path, JIT, 1, 9.32 * 1.4, probe_ms=1.5)
    run = Run(tmp_path / RUN)
    assert run.short(JIT) and not run.short(CELL) and not run.short(NN)
    spread = {RUN: {pair: PairSpread(0.02, 6.0, {})}}
    assert undecided(run.metrics, spread=spread)[0].speedup.n == 2
    measure, calls = writer({JIT: itertools.cycle([9.31])})
    left = topup(
        run, 600, 20, 0.05, 0.95, {RUN: {pair: PairSpread(0.02, 6.0, {})}}, measure=measure
    )
    assert calls == [(JIT, 3)]
    assert [row.speedup.n for row in left] == [3]
    out = capsys.readouterr().out
    assert "+1 process of 1 jobs for TorchScript" in out
    assert "replacing processes left out for a slow spell" in out
    assert "keeps it across the threshold however many processes" in out


def test_a_decided_verdict_gets_back_a_process_a_slow_spell_took(tmp_path, capsys):
    """nn.LSTM vs the cell loop is decided (3.3x), but nn.LSTM's process 1 ran in a slow spell:
    the top-up gives that job one process in its place (and only that), then stops."""
    run = base_run(tmp_path, jit_ms=(9.0, 9.02, 9.01), cell_ms=(10.0, 10.02, 10.01))
    write_process(tmp_path, NN, 1, 4.5, probe_ms=1.5)
    run = Run(tmp_path / RUN)
    assert undecided(run.metrics) == [] and run.short(NN)
    measure, calls = writer({NN: itertools.cycle([3.02])})
    assert topup(run, 600, 20, 0.05, 0.95, measure=measure) == []
    assert calls == [(NN, 3)] and not run.short(NN)
    out = capsys.readouterr().out
    assert "+1 process of 1 jobs for library kernels (nn.LSTM vs hand-written cell)" in out
    assert "nothing left to decide; undecided: 0" in out


def test_processes_a_spell_took_are_given_back_where_the_report_had_to_keep_them(tmp_path):
    """Two of nn.LSTM's three processes ran in slow spells: the report keeps them (one would
    leave no interval), yet the job has one clean process. The top-up gives it two, after
    which the report leaves the two out and the job rests on three clean processes."""
    run = base_run(tmp_path, jit_ms=(9.0, 9.02, 9.01), cell_ms=(10.0, 10.02, 10.01))
    write_process(tmp_path, NN, 1, 4.5, probe_ms=1.5)
    write_process(tmp_path, NN, 2, 4.4, probe_ms=1.5)
    run = Run(tmp_path / RUN)
    assert run.short(NN)
    measure, calls = writer({NN: itertools.cycle([3.02])})
    assert topup(run, 600, 20, 0.05, 0.95, measure=measure) == []
    assert calls == [(NN, 3), (NN, 4)] and not run.short(NN)
    rows = records(run.metrics, "profile").set_index("variant")
    assert (rows.loc["torch-lstm-nn", "processes"], rows.loc["torch-lstm-nn", "disturbed"]) == (
        3,
        2,
    )


def test_a_verdict_the_budget_can_decide_goes_before_a_process_given_back(tmp_path):
    """TorchScript undecided (two steps of 2 s would decide it) and nn.LSTM's job one process
    short (its verdict decided). With 600 s TorchScript's step comes first and nn.LSTM's
    process after it; with 3 s (its projected 4 s do not fit) nn.LSTM's process first."""
    for budget, first in ((600, {JIT, CELL}), (3, {NN})):
        root = tmp_path / str(budget)
        base_run(root)
        write_process(root, NN, 1, 4.5, probe_ms=1.5)
        run = Run(root / RUN)
        steady = {JIT: itertools.cycle([9.0, 9.02]), CELL: itertools.cycle([10.0, 10.03])}
        measure, calls = writer(steady | {NN: itertools.cycle([3.01])})
        topup(run, budget, 20, 0.05, 0.95, measure=measure, clock=lambda: 0.0)
        assert {job for job, _ in calls[: len(first)]} == first
        assert sorted({job for job, _ in calls}) == sorted({JIT, CELL, NN})


def test_an_undecided_verdict_beyond_the_budget_still_gets_back_its_lost_process(tmp_path):
    """TorchScript on the threshold (1.05x: no budget decides it) and its process 1 in a slow
    spell: with 1.5 s (a TorchScript step takes 2 s) the top-up still gives its job the lost
    process back (1 s) first."""
    run = base_run(tmp_path, jit_ms=(9.52, 9.5, 9.48), cell_ms=(10.0, 10.0, 10.0))
    write_process(tmp_path, JIT, 1, 9.5 * 1.4, probe_ms=1.5)
    run = Run(tmp_path / RUN)
    assert [row.optimisation for row in undecided(run.metrics)] == ["TorchScript"]
    measure, calls = writer({JIT: itertools.cycle([9.5]), CELL: itertools.cycle([10.0])})
    topup(run, 1.5, 20, 0.05, 0.95, measure=measure, clock=lambda: 0.0)
    assert calls[0] == (JIT, 3) and not run.short(JIT)


def test_a_process_that_failed_is_not_given_back(tmp_path):
    """nn.LSTM's process 1 failed (not a spell): the job is not short, and the top-up, with
    nothing undecided, times nothing."""
    base_run(tmp_path, jit_ms=(9.0, 9.02, 9.01), cell_ms=(10.0, 10.02, 10.01))
    write_process(tmp_path, NN, 1, 0.0, status="failed")
    run = Run(tmp_path / RUN)
    assert not run.short(NN)
    measure, calls = writer({})
    assert topup(run, 600, 20, 0.05, 0.95, measure=measure) == [] and calls == []


def test_an_undecided_verdicts_lost_process_goes_back_before_a_decided_ones(tmp_path):
    """TorchScript on the threshold (no budget decides it) and nn.LSTM's decided verdict each
    lost a process to a slow spell; TorchScript's step costs 2 s, nn.LSTM's 1 s. The undecided
    verdict's process goes back first: a spell-hit process may be all that keeps it open,
    while the decided one only gets a narrower interval."""
    base_run(tmp_path, jit_ms=(9.52, 9.5, 9.48), cell_ms=(10.0, 10.0, 10.0))
    write_process(tmp_path, JIT, 1, 9.5 * 1.4, probe_ms=1.5)
    write_process(tmp_path, JIT, 2, 9.48, loop_s=2.0)
    write_process(tmp_path, NN, 1, 4.5, probe_ms=1.5)
    run = Run(tmp_path / RUN)
    assert run.short(JIT) and run.short(NN)
    assert [row.optimisation for row in undecided(run.metrics)] == ["TorchScript"]
    steady = {JIT: itertools.cycle([9.5]), CELL: itertools.cycle([10.0])}
    measure, calls = writer(steady | {NN: itertools.cycle([3.01])})
    topup(run, 600, 5, 0.05, 0.95, measure=measure, clock=lambda: 0.0)
    assert calls[:2] == [(JIT, 3), (NN, 3)]


def test_a_row_without_an_interval_gets_no_process_back(tmp_path):
    """A figure-only sweep's row rests on one process a job: no interval, judged by none. A
    process given back to it would change nothing the report says, so none is planned; the
    same row with an interval gets one."""
    base_run(tmp_path, jit_ms=(9.0, 9.02, 9.01), cell_ms=(10.0, 10.02, 10.01))
    write_process(tmp_path, NN, 1, 4.5, probe_ms=1.5)
    run = Run(tmp_path / RUN)
    settings = {"max_processes": 20, "threshold": 0.05, "confidence": 0.95}
    (row,) = [row for row, _ in speed_verdicts(run.metrics) if NN in row.jobs]
    given = replacement(run, row, False, Costs(run), {}, settings, lambda device: True)
    assert given is not None and given.jobs == [NN]
    one_process = dataclasses.replace(row, speedup=Interval(row.speedup.median))
    assert replacement(run, one_process, False, Costs(run), {}, settings, lambda d: True) is None


def test_an_undecided_verdicts_lost_process_goes_back_before_a_dearer_step(tmp_path):
    """Run AO: a slow spell took two of the batched rung's three processes, hoisting read
    1.24x (0.78-1.98), and its 3-s give-back waited while TorchScript's and torch.compile's
    projected steps took the 30 s. Here nn.LSTM vs the cell loop is undecided on the two
    processes a spell left (2.36x (0.03-189)) and TorchScript is two 2-s steps from decided:
    nn.LSTM's 1-s give-back goes first (before, TorchScript's step did), and TorchScript's
    steps still come."""
    base_run(tmp_path)
    write_process(tmp_path, NN, 1, 4.5, probe_ms=1.5)
    write_process(tmp_path, NN, 2, 6.0)
    run = Run(tmp_path / RUN)
    assert run.short(NN)
    assert [r.optimisation for r in undecided(run.metrics)] == [
        "library kernels (nn.LSTM vs hand-written cell)",
        "TorchScript",
    ]
    steady = {JIT: itertools.cycle([9.0, 9.02]), CELL: itertools.cycle([10.0, 10.03])}
    measure, calls = writer(steady | {NN: itertools.cycle([3.01])})
    topup(run, 600, 5, 0.05, 0.95, measure=measure, clock=lambda: 0.0)
    assert calls[0] == (NN, 3) and (JIT, 3) in calls and (CELL, 3) in calls
