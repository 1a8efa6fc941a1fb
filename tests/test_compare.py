"""`rnnopt compare` and `rnnopt export-pyperf` on two tiny result sets written in tmp_path."""

from __future__ import annotations

import re
import subprocess
import sys

import pandas as pd
import pyperf
import pytest

from rnnopt.cli import main
from rnnopt.records import make_record, write_record
from rnnopt.report import table
from rnnopt.report.compare import verdict_rows
from rnnopt.report.intervals import ratio_interval
from rnnopt.report.pyperf_export import export
from tests.test_aggregate import ENV

RUN = "cpu-x"
SHAPE = {"batch": 16, "seq_len": 20, "input_size": 32, "hidden_size": 64}
SPREAD = (1.0, 1.02, 0.98, 1.01, 0.99)  # one process's calls around its median
NUMBER_COLUMNS = table.COMPARISON_COLUMNS


def samples(median_ms: float, process: int) -> list[float]:
    """The calls of one process; processes differ by 1% in their medians."""
    return [median_ms * (1 + 0.01 * process) * spread for spread in SPREAD]


def write(root, relative, kind, metrics, variant="numpy-lstm-fused", **fields):
    framework, cell, _ = variant.split("-", 2)
    record = make_record(
        kind,
        seed=0,
        config={},
        metrics=metrics,
        variant=variant,
        framework=framework,
        cell=cell,
        dtype="float32",
        device="cpu",
        env=ENV,
        phase="step",
        shape=SHAPE,
        threads=1,
        **fields,
    )
    write_record(root / RUN / relative, record)


def write_profile(root, variant, median_ms, processes=3):
    for process in range(processes):
        calls = samples(median_ms, process)
        time_ms = {"median": sorted(calls)[2], "iqr": 0.02, "min": min(calls), "mean": 1.0, "n": 5}
        relative = f"profile/{variant}/cpu-float32/b16-t20-i32-h64/step-threads1-p{process}.json"
        metrics = {"time_ms": time_ms, "samples_ms": calls}
        write(root, relative, "profile", metrics, variant, process=process)


def write_memory(root, variant, peak_mib):
    relative = f"memory/{variant}/cpu-float32/b16-t20-i32-h64/step-threads1.json"
    write(root, relative, "memory", {"peak_mib": peak_mib}, variant)


def result_set(root, slowdown=1.0, peak_mib=2.0):
    """Two three-process rows, a one-process row and a memory row; times times `slowdown`."""
    write_profile(root, "numpy-lstm-fused", 4.0 * slowdown)
    write_profile(root, "numpy-lstm-naive", 9.0 * slowdown)
    write_profile(root, "numpy-lstm-batched", 5.0 * slowdown, processes=1)
    write_memory(root, "numpy-lstm-fused", peak_mib)
    return root / RUN


def compare(capsys, a, b, *flags):
    status = main(["compare", str(a), str(b), *flags])
    return status, capsys.readouterr()


def test_identical_sets_change_nothing_and_pass_the_gate(tmp_path, capsys):
    a = result_set(tmp_path / "results-main")
    b = result_set(tmp_path / "results-upgrade")
    status, out = compare(capsys, a, b, "--fail-on", "time", "--fail-on", "peak_mib")
    assert status == 0
    summary = out.out.splitlines()[0]
    assert summary.startswith("B vs A: 0 of 3 profile rows significantly slower, 0 faster, ")
    assert "2 no significant change, 0 inconclusive, 1 with one process" in summary
    assert "0 memory changes; 0 verdicts changed" in summary
    assert "one process: no interval" in out.out and "| no change" in out.out


def test_thirty_percent_slower_is_a_regression_and_fails_the_gate(tmp_path, capsys):
    a = result_set(tmp_path / "results-main")
    b = result_set(tmp_path / "results-upgrade", slowdown=1.3)
    csv = tmp_path / "compare.csv"
    status, out = compare(capsys, a, b, "--fail-on", "time", "--csv", str(csv))
    assert status == 1
    assert "2 time rows regress beyond 5%" in out.err
    assert out.out.startswith("B vs A: 2 of 3 profile rows significantly slower")
    rows = pd.read_csv(csv)
    time = rows[rows["metric"] == "time"].set_index("variant")
    assert time.loc["numpy-lstm-fused", "ratio"] == pytest.approx(1.3)
    assert time.loc["numpy-lstm-fused", "low"] > 1.05
    assert time.loc["numpy-lstm-batched", "change"] == "one process: no interval"
    assert pd.isna(time.loc["numpy-lstm-batched", "low"])
    for column in ("a", "b", "ratio", "low", "high", "processes_a", "processes_b"):
        assert pd.api.types.is_numeric_dtype(rows[column]), column
    assert time.loc["numpy-lstm-naive", ["processes_a", "processes_b"]].tolist() == [3, 3]
    assert compare(capsys, a, b, "--fail-on", "peak_mib")[0] == 0
    assert compare(capsys, a, b)[0] == 0


def test_a_larger_memory_peak_fails_its_gate(tmp_path, capsys):
    a = result_set(tmp_path / "results-main")
    b = result_set(tmp_path / "results-upgrade", peak_mib=2.5)
    status, out = compare(capsys, a, b, "--fail-on", "peak_mib", "--out", str(tmp_path / "c.md"))
    assert status == 1
    assert "1 memory changes (1 regressions)" in out.out
    assert "| regression" in (tmp_path / "c.md").read_text()


def test_a_results_folder_with_one_run_or_a_named_run(tmp_path, capsys):
    result_set(tmp_path / "results-main")
    result_set(tmp_path / "results-upgrade")
    assert compare(capsys, tmp_path / "results-main", tmp_path / "results-upgrade")[0] == 0
    (tmp_path / "results-upgrade" / "gpu-y" / "profile").mkdir(parents=True)
    status, out = compare(capsys, tmp_path / "results-main", tmp_path / "results-upgrade")
    assert status == 2
    assert out.err.strip().endswith("holds 2 runs (cpu-x, gpu-y); pick one with --run NAME")
    flags = ("--run", RUN)
    assert compare(capsys, tmp_path / "results-main", tmp_path / "results-upgrade", *flags)[0] == 0


@pytest.mark.parametrize("where", ["missing", "empty"])
def test_a_bad_path_is_one_line(tmp_path, capsys, where):
    a = result_set(tmp_path / "results-main")
    (tmp_path / "empty").mkdir()
    status, out = compare(capsys, a, tmp_path / where)
    assert status == 2
    assert out.err.count("\n") == 1 and "Traceback" not in out.err
    assert out.err.startswith(f"rnnopt compare: error: {tmp_path / where}: ")


def test_changed_verdict_categories_are_listed(tmp_path, capsys, monkeypatch):
    def numbers(speedup, category):
        row = dict.fromkeys(NUMBER_COLUMNS) | {
            "optimisation": "fusion",
            "compared": "fused vs batched",
            "shape": "small",
            "speedup": speedup,
            "low": speedup * 0.9,
            "high": speedup * 1.1,
            "verdict": f"{category}: {speedup}x",
            "category": category,
        }
        return pd.DataFrame([row], columns=list(NUMBER_COLUMNS))

    sides = iter([numbers(1.4, "supported"), numbers(1.02, "no meaningful difference")])
    monkeypatch.setattr(table, "comparison_numbers", lambda metrics, **rules: next(sides))
    a = result_set(tmp_path / "results-main")
    b = result_set(tmp_path / "results-upgrade")
    status, out = compare(capsys, a, b)
    assert status == 0
    # 1.02 is outside A's 1.26-1.54
    assert out.out.splitlines()[0].endswith(
        "; 0 of 1 speedups of B inside A's interval; 1 verdicts changed"
    )
    assert "| supported: 1.4x | no meaningful difference: 1.02x |" in out.out
    # the speedups table says which row fell outside
    assert re.search(
        r"\| 1\.40x \(1\.26-1\.54\) +\| 1\.02x \(0\.92-1\.12\) +\| \*\*no\*\* +\|", out.out
    )
    same = verdict_rows(numbers(1.4, "supported"), numbers(1.3, "supported"))
    assert not same["changed"].any() and same["speedup_b"].tolist() == [1.3]
    assert same["inside"].tolist() == [True]  # 1.3 inside 1.26-1.54
    no_interval = numbers(1.4, "not judged").assign(low=None, high=None)
    assert verdict_rows(no_interval, numbers(1.3, "supported"))["inside"].isna().all()


def test_the_pyperf_export_has_one_run_per_process_in_seconds(tmp_path, capsys):
    run_dir = result_set(tmp_path / "results-main")
    out = tmp_path / "main.json"
    assert main(["export-pyperf", str(run_dir), "--out", str(out)]) == 0
    assert "(3 benchmarks, 7 runs)" in capsys.readouterr().out
    suite = pyperf.BenchmarkSuite.load(str(out))
    benchmark = suite.get_benchmark("numpy-lstm-fused f32 cpu B16 T20 I32 H64 step threads1")
    runs = benchmark.get_runs()
    assert len(runs) == 3
    assert [run.get_metadata()["process"] for run in runs] == [0, 1, 2]
    assert list(runs[1].values) == pytest.approx([ms / 1e3 for ms in samples(4.0, 1)])
    assert benchmark.get_unit() == "second"
    one_process = suite.get_benchmark("numpy-lstm-batched f32 cpu B16 T20 I32 H64 step threads1")
    assert one_process.get_nrun() == 1 and one_process.get_nvalue() == 5


def test_a_top_up_process_joins_its_job_in_the_export_and_in_compare(tmp_path, capsys):
    """rnnopt topup writes more processes of a job under results/<run>/topup/."""
    run_dir = result_set(tmp_path / "results-main")
    calls = samples(4.0, 3)
    time_ms = {"median": sorted(calls)[2], "iqr": 0.02, "min": min(calls), "mean": 1.0, "n": 5}
    relative = "topup/numpy-lstm-fused/cpu-float32/b16-t20-i32-h64/step-threads1-p3.json"
    metrics = {"time_ms": time_ms, "samples_ms": calls}
    write(tmp_path / "results-main", relative, "profile", metrics, process=3)
    assert main(["export-pyperf", str(run_dir), "--out", str(tmp_path / "main.json")]) == 0
    suite = pyperf.BenchmarkSuite.load(str(tmp_path / "main.json"))
    benchmark = suite.get_benchmark("numpy-lstm-fused f32 cpu B16 T20 I32 H64 step threads1")
    assert [run.get_metadata()["process"] for run in benchmark.get_runs()] == [0, 1, 2, 3]
    b = result_set(tmp_path / "results-upgrade")
    status, out = compare(capsys, run_dir, b, "--csv", str(tmp_path / "c.csv"))
    rows = pd.read_csv(tmp_path / "c.csv")
    time = rows[rows["metric"] == "time"].set_index("variant")
    assert time.loc["numpy-lstm-fused", ["processes_a", "processes_b"]].tolist() == [4, 3]


def test_pyperf_reads_and_compares_the_export(tmp_path):
    main_json, upgrade_json = tmp_path / "main.json", tmp_path / "upgrade.json"
    export(result_set(tmp_path / "results-main"), main_json)
    export(result_set(tmp_path / "results-upgrade", slowdown=1.3), upgrade_json)
    commands = (["stats", main_json], ["hist", main_json], ["compare_to", main_json, upgrade_json])
    for command in commands:
        done = subprocess.run(
            [sys.executable, "-m", "pyperf", *map(str, command)], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
    assert "1.30x slower" in done.stdout


def test_a_run_without_samples_cannot_be_exported(tmp_path, capsys):
    run_dir = tmp_path / "results" / RUN
    time_ms = {"median": 4.0, "iqr": 0.1, "min": 3.9, "mean": 4.0, "n": 50}
    write(tmp_path / "results", "profile/x/step-threads1.json", "profile", {"time_ms": time_ms})
    assert main(["export-pyperf", str(run_dir), "--out", str(tmp_path / "x.json")]) == 2
    assert "no ok profile record with samples_ms" in capsys.readouterr().err


def test_a_speedup_that_grew_beyond_both_runs_errors_is_larger():
    """The change of a speedup between runs: B/A with the Welch interval of the two log
    speedups (intervals.change_interval), judged by the threshold rule."""
    a = ratio_interval([13.0, 13.2, 12.9], [10.0, 10.1, 9.9])
    b = ratio_interval([13.0, 13.1, 12.8], [9.0, 9.1, 8.9])

    def numbers(interval, se=True):
        row = dict.fromkeys(NUMBER_COLUMNS) | {
            "optimisation": "fusion",
            "compared": "fused vs batched",
            "shape": "small",
            "speedup": interval.median,
            "low": interval.low,
            "high": interval.high,
            "processes": 3,
            "se_log": interval.se if se else None,
            "welch_df": interval.df if se else None,
            "verdict": "supported",
            "category": "supported",
        }
        return pd.DataFrame([row], columns=list(NUMBER_COLUMNS))

    grew = verdict_rows(numbers(a), numbers(b))
    assert grew["speedup_change"].tolist() == ["larger"]
    assert grew["change_ratio"].iloc[0] == pytest.approx(b.median / a.median)
    assert grew["change_low"].iloc[0] > 1.05
    assert grew["holds_one"].tolist() == [False]
    same = verdict_rows(numbers(a), numbers(a))
    assert same["speedup_change"].tolist() == ["no significant change"]
    assert same["holds_one"].tolist() == [True]
    without = verdict_rows(numbers(a, se=False), numbers(b))
    assert without["speedup_change"].tolist() == ["-"]
    assert without["holds_one"].isna().all()


def test_the_summary_says_which_inconclusive_speedup_changes_hold_one():
    """By the threshold rule a rerun of few processes reads "inconclusive" whether or not the
    runs differ; the summary also counts the change intervals that hold 1.00x."""
    from rnnopt.report.compare import Comparison, summary

    verdicts = pd.DataFrame(
        [
            {"compared": "a", "change_low": 0.93, "change_high": 1.08, "holds_one": True},
            {"compared": "b", "change_low": 1.01, "change_high": 1.12, "holds_one": False},
            {"compared": "c", "change_low": 0.97, "change_high": 1.02, "holds_one": True},
            {"compared": "d", "change_low": None, "change_high": None, "holds_one": pd.NA},
        ]
    ).assign(
        shape="small",
        speedup_a=1.1,
        speedup_b=1.1,
        inside=True,
        speedup_change=["inconclusive", "inconclusive", "no significant change", "-"],
        changed=False,
        reference_split=pd.NA,
    )
    profile = pd.DataFrame({"change": []})
    memory = pd.DataFrame({"change": [], "regression": []})
    text = summary(Comparison(profile, memory, verdicts, 0, 0))
    assert (
        "speedups B/A: 0 larger, 0 smaller, 1 no significant change, 2 inconclusive of 3 "
        "(2 of 3 hold 1.00x: no change detected)"
    ) in text


def test_an_optimisation_that_pays_less_fails_the_speedup_gate(tmp_path, capsys):
    """Hoisting (fused vs batched, float32) pays 1.25x in A; in B the fused rung is 1.3x
    slower and it pays 0.96x: its speedup is smaller beyond the threshold."""
    for root, fused_ms in ((tmp_path / "results-main", 4.0), (tmp_path / "results-upgrade", 5.2)):
        write_profile(root, "numpy-lstm-fused", fused_ms)
        write_profile(root, "numpy-lstm-batched", 5.0)
    a, b = tmp_path / "results-main" / RUN, tmp_path / "results-upgrade" / RUN
    status, out = compare(capsys, a, b, "--fail-on", "speedup")
    assert status == 1
    assert "1 speedup rows regress beyond 5%" in out.err
    assert "speedups B/A: 0 larger, 1 smaller, 0 no significant change" in out.out
    assert re.search(r"\| 0\.77x \(0\.\d\d-0\.\d\d\) +\| smaller +\|", out.out)
    assert compare(capsys, b, a, "--fail-on", "speedup")[0] == 0  # the other way: larger


def test_a_speedup_two_rows_share_counts_once_in_the_rerun_check():
    """In-place's speedup is also the GC row's: the summary counts distinct speedups."""
    from rnnopt.report.compare import Comparison, summary

    shared = {"compared": "numpy-*-inplace f64 vs numpy-*-naive f64", "shape": "all"}
    verdicts = pd.DataFrame(
        [
            shared | {"speedup_a": 1.07, "speedup_b": 1.11, "inside": False},
            shared | {"speedup_a": 1.07, "speedup_b": 1.11, "inside": False},
            {"compared": "x", "shape": "all", "speedup_a": 2.0, "speedup_b": 2.0, "inside": True},
        ]
    ).assign(speedup_change="-", changed=False, reference_split=pd.NA)
    profile = pd.DataFrame({"change": []})
    memory = pd.DataFrame({"change": [], "regression": []})
    text = summary(Comparison(profile, memory, verdicts, 0, 0))
    assert "1 of 2 speedups of B inside A's interval" in text
