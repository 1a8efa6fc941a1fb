"""The between-run spread of a host's speedups (rnnopt rerun-spread) and the intervals it
widens in the report, the top-up's verdicts and `rnnopt compare`."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from rnnopt.cli import main
from rnnopt.report import table
from rnnopt.report.compare import load_run
from rnnopt.report.intervals import between_run_sd, ratio_interval
from rnnopt.report.rerun_spread import read
from tests.test_compare import RUN, samples, write_profile

HOISTED = "hoisted input projection"  # numpy-*-fused f32 vs numpy-*-batched f32
PAIR = (
    "numpy-lstm-fused float32 cpu b16-t20-i32-h64 threads1",
    "numpy-lstm-batched float32 cpu b16-t20-i32-h64 threads1",
)
FUSED_MS = (4.0, 4.2, 3.9, 4.15)  # the fused rung shifts from run to run; batched stays


def runs(tmp_path, fused=FUSED_MS, candidate="numpy-lstm-fused", baseline="numpy-lstm-batched"):
    """One result set a run: the candidate at each of `fused`'s times, the baseline at 5 ms."""
    folders = []
    for i, fused_ms in enumerate(fused):
        root = tmp_path / f"results-{i}"
        write_profile(root, candidate, fused_ms)
        write_profile(root, baseline, 5.0)
        folders.append(root / RUN)
    return folders


def fast(median_ms: float, process: int) -> float:
    """A process's time as the report takes it (the 2nd percentile of its calls)."""
    return float(pd.Series(samples(median_ms, process)).quantile(0.02))


def spread_of(tmp_path, capsys, folders, *flags):
    out = tmp_path / "spread.csv"
    status = main(["rerun-spread", *map(str, folders), "--out", str(out), *flags])
    return status, capsys.readouterr(), out


def without_pooled(out, tmp_path):
    """The spread file as written before it held the runs' pooled speedup: verdicts read
    each run's own interval."""
    older = tmp_path / "no-pooled.csv"
    pd.read_csv(out).drop(columns=["mean_log", "mean_se_log"]).to_csv(older, index=False)
    return older


def test_the_spread_is_the_runs_excess_variance_of_each_pair(tmp_path, capsys):
    status, printed, out = spread_of(tmp_path, capsys, runs(tmp_path))
    assert status == 0
    assert f"wrote {out}: 1 pairs of {RUN}" in printed.out
    rows = pd.read_csv(out)
    assert list(rows[["run", "candidate", "baseline", "runs"]].iloc[0]) == [RUN, *PAIR, 4]
    intervals = [
        ratio_interval([fast(5.0, p) for p in range(3)], [fast(ms, p) for p in range(3)])
        for ms in FUSED_MS
    ]
    expected = between_run_sd([math.log(i.median) for i in intervals], [i.se for i in intervals])
    assert expected > 0.01
    assert rows["run_sd_log"].iloc[0] == pytest.approx(expected)
    assert read(out)[RUN][PAIR][:2] == (pytest.approx(expected), 3.0)


def test_the_report_widens_the_intervals_of_the_runs_it_names(tmp_path, capsys):
    folders = runs(tmp_path)
    _, _, out = spread_of(tmp_path, capsys, folders)
    metrics = load_run(folders[0])
    plain = table.comparison_numbers(metrics)
    wide = table.comparison_numbers(metrics, spread=read(out))
    row = lambda t: t[(t["optimisation"] == HOISTED) & (t["shape"] == "all")].iloc[0]  # noqa: E731
    assert row(wide)["speedup"] == row(plain)["speedup"]
    assert row(wide)["low"] < row(plain)["low"] and row(wide)["high"] > row(plain)["high"]
    assert row(wide)["run_sd_log"] == pytest.approx(pd.read_csv(out)["run_sd_log"].iloc[0])
    assert row(plain)["run_sd_log"] == 0
    other_host = {"cpu-other-0000": read(out)[RUN]}
    assert table.comparison_numbers(metrics, spread=other_host).equals(plain)


def test_a_rerun_file_keeps_the_rows_of_other_hosts(tmp_path, capsys):
    _, _, out = spread_of(tmp_path, capsys, runs(tmp_path))
    rows = pd.read_csv(out)
    # another host's row, written before the reads columns existed
    older = rows.assign(run="cpu-other-0000").drop(columns=[c for c in rows if "reads_" in c])
    older.to_csv(out, index=False)
    _, _, out = spread_of(tmp_path, capsys, runs(tmp_path))
    assert sorted(pd.read_csv(out)["run"]) == sorted(["cpu-other-0000", RUN])
    assert out.read_text().splitlines()[0].endswith(",reads_same,reads_inconclusive")
    assert ",4,0,0,0\n" in out.read_text()  # counts as integers, not 4.0
    assert read(out)["cpu-other-0000"][PAIR].reads == {} and read(out)[RUN][PAIR].reads


@pytest.mark.parametrize(
    ("count", "message"),
    [(2, "needs at least 3 runs, got 2"), (4, "no speedup measured in 3 of the runs given")],
)
def test_too_few_runs_is_one_line(tmp_path, capsys, count, message):
    folders = runs(tmp_path)[:count]
    if count == 4:  # four runs, but no pair of the comparison table in them
        folders = []
        for i in range(4):
            write_profile(tmp_path / f"only-{i}", "numpy-lstm-fused", 4.0)
            folders.append(tmp_path / f"only-{i}" / RUN)
    status, printed, out = spread_of(tmp_path, capsys, folders)
    assert status == 2 and not out.exists()
    assert printed.err == f"rnnopt rerun-spread: error: rerun-spread: {message}\n"


def test_a_bad_spread_file_is_one_line(tmp_path, capsys):
    folders = runs(tmp_path)
    bad = tmp_path / "bad.csv"
    bad.write_text("run,candidate\nx,y\n")
    cases = ((bad, "not a rerun spread (no column 'baseline')"), (tmp_path / "no.csv", ""))
    for path, why in cases:
        status = main(["compare", str(folders[0]), str(folders[1]), "--rerun-spread", str(path)])
        err = capsys.readouterr().err
        assert status == 2 and err.count("\n") == 1 and "Traceback" not in err
        assert err.startswith(f"rnnopt compare: error: {path}: ") and why in err


def test_the_reading_note_names_the_runs_widened(tmp_path, capsys):
    from rnnopt.report.build import between_runs_note

    folders = runs(tmp_path)
    _, _, out = spread_of(tmp_path, capsys, folders)
    metrics = load_run(folders[0])
    assert f"The intervals of {RUN} (measured over 4 runs) also carry" in between_runs_note(
        metrics, read(out)
    )
    assert between_runs_note(metrics, None).startswith("No between-run spread is measured")


def test_a_write_that_fails_leaves_no_half_written_output(tmp_path):
    from rnnopt.cli.common import write_output
    from rnnopt.errors import UserError

    def half(path):
        path.write_text("run,candi")
        raise OSError(28, "No space left on device")

    out = tmp_path / "spread.csv"
    with pytest.raises(UserError, match=r"spread.csv: cannot write \(No space left on device\)"):
        write_output(out, half)
    assert list(tmp_path.iterdir()) == []
    write_output(out, lambda path: path.write_text("ok\n"))
    assert out.read_text() == "ok\n" and list(tmp_path.iterdir()) == [out]


def test_a_run_whose_pair_rests_on_spell_slowed_processes_is_left_out(tmp_path, capsys):
    """Run AC: every TorchScript process ran in a slow spell (the report kept them: none clean
    to leave two), and the spread of four runs read 20.6% where the other three gave 0. A
    run's pair that rests on a spell-slowed process measures the spell, not a run's shift."""
    import json

    folders = runs(tmp_path, fused=(4.0, 4.0, 6.0, 4.0))
    for path in folders[2].rglob("step-*.json"):  # the third run's fused processes in spells
        record = json.loads(path.read_text())
        probe = 2.0 if "numpy-lstm-fused" in str(path) else 1.0
        record["metrics"]["contention"] = {"probe_before_ms": probe, "probe_after_ms": probe}
        path.write_text(json.dumps(record))
    status, _, out = spread_of(tmp_path, capsys, folders)
    assert status == 0
    row = pd.read_csv(out).iloc[0]
    assert row["runs"] == 3 and row["run_sd_log"] == pytest.approx(0.0)


SPREAD_RUNS = (4.0, 4.1, 4.2, 4.3, 4.4)  # 1.25x down to 1.14x: the last run's interval, widened
# by the spread of all five, reaches below the 5% threshold; the other four stay above it


def test_the_file_counts_how_the_runs_read_each_pair(tmp_path, capsys):
    from rnnopt.report.intervals import classify, with_run_spread

    status, printed, out = spread_of(tmp_path, capsys, runs(tmp_path, fused=SPREAD_RUNS))
    assert status == 0 and "read faster 4, inconclusive 1)" in printed.out
    row = pd.read_csv(out).iloc[0]
    own = [
        ratio_interval([fast(5.0, p) for p in range(3)], [fast(ms, p) for p in range(3)])
        for ms in SPREAD_RUNS
    ]
    readings = [classify(with_run_spread(i, row["run_sd_log"], 4)) for i in own]
    assert readings == ["faster"] * 4 + ["inconclusive"]
    counts = row[["reads_faster", "reads_slower", "reads_same", "reads_inconclusive"]]
    assert list(counts) == [4, 0, 0, 1]
    assert read(out)[RUN][PAIR].reads == {
        "faster": 4,
        "slower": 0,
        "no meaningful difference": 0,
        "inconclusive": 1,
    }
    # the same runs against a 20% threshold: the widened intervals all cross it
    _, _, out = spread_of(tmp_path, capsys, runs(tmp_path, fused=SPREAD_RUNS), "--threshold", "0.2")
    assert pd.read_csv(out)["reads_inconclusive"].iloc[0] == 5


def test_the_report_says_where_the_reference_runs_read_a_speedup_otherwise(tmp_path, capsys):
    folders = runs(tmp_path, fused=SPREAD_RUNS)
    _, _, out = spread_of(tmp_path, capsys, folders)
    spread = read(without_pooled(out, tmp_path))
    for index, agree in ((0, 4), (4, 1)):  # a run that read it faster, the one inconclusive
        metrics = load_run(folders[index])
        numbers = table.comparison_numbers(metrics, spread=spread)
        row = numbers[(numbers["optimisation"] == HOISTED) & (numbers["shape"] == "all")].iloc[0]
        assert (row["reference_runs"], row["reference_agree"]) == (5, agree)
        page = table.comparison_table(metrics, spread=spread)
        cell = page.loc[page["optimisation"] == HOISTED, f"{RUN}: verdict"].iloc[0]
        assert cell.endswith(
            "(a rerun may read otherwise: this host's reference runs read the speedup "
            "4 faster, 1 inconclusive of 5)"
        )


def test_no_note_where_every_reference_run_read_the_same_or_the_file_has_no_reads(tmp_path, capsys):
    folders = runs(tmp_path)  # FUSED_MS: all four read faster
    _, _, out = spread_of(tmp_path, capsys, folders)
    assert pd.read_csv(out)["reads_faster"].iloc[0] == 4
    metrics = load_run(folders[0])
    older = tmp_path / "older.csv"  # a file written before the reads columns
    pd.read_csv(out).drop(columns=[c for c in pd.read_csv(out) if c.startswith("reads_")]).to_csv(
        older, index=False
    )
    for path, runs_read in ((out, 4), (older, None)):
        page = table.comparison_table(metrics, spread=read(path))
        cell = page.loc[page["optimisation"] == HOISTED, f"{RUN}: verdict"].iloc[0]
        assert cell.startswith("supported") and "rerun may read otherwise" not in cell
        numbers = table.comparison_numbers(metrics, spread=read(path))
        row = numbers[(numbers["optimisation"] == HOISTED) & (numbers["shape"] == "all")].iloc[0]
        if runs_read:
            assert row["reference_runs"] == row["reference_agree"] == runs_read
        else:
            assert pd.isna(row["reference_runs"]) and pd.isna(row["reference_agree"])
    assert read(older)[RUN][PAIR].reads == {}


def test_compare_says_which_changed_verdicts_the_reference_runs_read_both_ways(tmp_path, capsys):
    folders = runs(tmp_path, fused=SPREAD_RUNS)
    _, _, out = spread_of(tmp_path, capsys, folders)
    out = without_pooled(out, tmp_path)  # each run's verdict its own: the last one changes
    report = tmp_path / "compare.md"
    flags = ["--rerun-spread", str(out), "--out", str(report)]
    status = main(["compare", str(folders[0]), str(folders[4]), *flags])
    printed = capsys.readouterr().out
    assert status == 0
    assert (
        "; 1 verdicts changed (1 of them read both ways by this host's reference runs)" in printed
    )
    changed = report.read_text().split("## Verdicts changed")[1]
    assert "| 4 of 5 read it as A, 1 as B |" in changed
    # without reads (an older spread file) the count and the column say nothing
    older = tmp_path / "older.csv"
    pd.read_csv(out).iloc[:, :8].to_csv(older, index=False)
    main(["compare", str(folders[0]), str(folders[4]), "--rerun-spread", str(older)])
    assert (
        printed.split("\n")[0].replace(
            " (1 of them read both ways by this host's reference runs)", ""
        )
        == capsys.readouterr().out.split("\n")[0]
    )


def test_the_note_is_only_where_another_reading_would_change_the_verdict():
    """The GC row shows in-place's speedup but judges GC alone; float32's verdict fails on
    memory whatever the speed where its peak is not lower: a split speedup moves neither."""
    from rnnopt.report.comparisons import COMPARISONS
    from rnnopt.report.intervals import Interval
    from rnnopt.report.outcomes import Outcome
    from rnnopt.report.verdicts import reading_matters

    by_name = {c.optimisation: c for c in COMPARISONS}
    faster = Interval(1.3, 1.2, 1.4, (3, 3))
    for memory_ratio, matters in ((0.6, True), (1.2, False)):
        outcome = Outcome(speedup=faster, memory_ratio=memory_ratio)
        comparison = by_name["float32 instead of float64"]
        assert reading_matters(comparison, outcome, ["inconclusive"]) is matters
    gc_row = by_name["fewer temporaries, less garbage collection"]
    assert not reading_matters(gc_row, Outcome(speedup=faster, gc_share=(0.0, 0.0)), ["slower"])
    assert not reading_matters(by_name["float32 instead of float64"], Outcome(speedup=faster), [])


def test_no_note_on_a_row_whose_variants_failed_verification():
    from rnnopt.report.comparisons import COMPARISONS
    from rnnopt.report.intervals import Interval
    from rnnopt.report.outcomes import Outcome
    from rnnopt.report.rerun_spread import PairSpread

    jobs = tuple(
        (variant, "float32", "cpu", 16, 20, 32, 64, 1)
        for variant in ("numpy-lstm-fused", "numpy-lstm-batched")
    )
    reads = {"faster": 4, "slower": 0, "no meaningful difference": 0, "inconclusive": 1}
    pairs = {PAIR: PairSpread(0.01, 4.0, reads)}
    hoisted = next(c for c in COMPARISONS if c.optimisation == HOISTED)
    measured = Outcome(speedup=Interval(1.3, 1.2, 1.4, (3, 3)), jobs=jobs)
    assert table.rerun_note(hoisted, measured, pairs, 0.05).endswith(
        "4 faster, 1 inconclusive of 5)"
    )
    measured.unverified = ["numpy-lstm-fused f32 cpu"]
    assert table.rerun_note(hoisted, measured, pairs, 0.05) == ""


def test_a_change_the_reference_runs_never_split_on_is_not_counted_as_read_both_ways(
    tmp_path, capsys
):
    """Run AO: hoisting at the small shape, faster in all fourteen reference runs, read
    inconclusive after a spell took processes; compare must not file that under the splits."""
    folders = runs(tmp_path)  # all four read it faster
    _, _, out = spread_of(tmp_path, capsys, folders)
    later = tmp_path / "results-later"
    write_profile(later, "numpy-lstm-fused", 4.85)  # 1.03x: no longer faster
    write_profile(later, "numpy-lstm-batched", 5.0)
    report = tmp_path / "compare.md"
    flags = ["--rerun-spread", str(out), "--out", str(report)]
    assert main(["compare", str(folders[0]), str(later / RUN), *flags]) == 0
    printed = capsys.readouterr().out
    assert "; 1 verdicts changed" in printed and "read both ways" not in printed
    assert "| 4 of 4 read it as A, 0 as B |" in report.read_text()


def test_the_file_holds_the_runs_pooled_speedup(tmp_path, capsys):
    """mean_log and mean_se_log: the random-effects mean of the runs' log speedups, each run
    weighted by 1 / (se^2 + tau^2), and its standard error 1 / sqrt(sum of the weights)."""
    _, _, out = spread_of(tmp_path, capsys, runs(tmp_path, fused=SPREAD_RUNS))
    row = pd.read_csv(out).iloc[0]
    own = [
        ratio_interval([fast(5.0, p) for p in range(3)], [fast(ms, p) for p in range(3)])
        for ms in SPREAD_RUNS
    ]
    weights = [1 / (i.se**2 + row["run_sd_log"] ** 2) for i in own]
    mean = sum(w * math.log(i.median) for w, i in zip(weights, own, strict=True)) / sum(weights)
    assert row["mean_log"] == pytest.approx(mean)
    assert row["mean_se_log"] == pytest.approx(1 / math.sqrt(sum(weights)))
    pair = read(out)[RUN][PAIR]
    assert (pair.mean_log, pair.mean_se_log) == (pytest.approx(mean), row["mean_se_log"])
    assert math.isnan(read(without_pooled(out, tmp_path))[RUN][PAIR].mean_log)


def test_a_verdict_read_over_the_reference_runs_is_the_same_in_every_run(tmp_path, capsys):
    """SPREAD_RUNS: four runs read hoisting faster on their own, the fifth (1.14x) inconclusive.
    Pooled, the five measure the host's speedup at 1.19x (1.14-1.25); every one of them agrees
    with that, so every one reads it supported, and compare finds no verdict changed."""
    folders = runs(tmp_path, fused=SPREAD_RUNS)
    _, _, out = spread_of(tmp_path, capsys, folders)
    spread = read(out)
    for folder in folders:
        numbers = table.comparison_numbers(load_run(folder), spread=spread)
        row = numbers[(numbers["optimisation"] == HOISTED) & (numbers["shape"] == "all")].iloc[0]
        assert row["category"] == "supported" and row["reference_agrees"]
        assert (round(row["reference_low"], 3), round(row["reference_high"], 3)) == (1.137, 1.248)
        page = table.comparison_table(load_run(folder), spread=spread)
        cell = page.loc[page["optimisation"] == HOISTED, f"{RUN}: verdict"].iloc[0]
        assert cell.startswith(
            "supported (faster: 1.191x (1.137-1.248) over this host's 5 reference"
        )
        assert "rerun may read otherwise" not in cell
    flags = ["--rerun-spread", str(out), "--out", str(tmp_path / "compare.md")]
    assert main(["compare", str(folders[0]), str(folders[4]), *flags]) == 0
    assert "; 0 verdicts changed" in capsys.readouterr().out


def test_a_run_that_differs_from_the_reference_runs_is_judged_on_its_own(tmp_path, capsys):
    """The four FUSED_MS runs read hoisting 1.19-1.28x; a later run measures 1.03x, far outside
    what they predict for a run (a change since, or a rare shift): its verdict is its own
    interval's, and says that it differs."""
    _, _, out = spread_of(tmp_path, capsys, runs(tmp_path))
    later = tmp_path / "results-later"
    write_profile(later, "numpy-lstm-fused", 4.85)
    write_profile(later, "numpy-lstm-batched", 5.0)
    metrics = load_run(later / RUN)
    numbers = table.comparison_numbers(metrics, spread=read(out))
    row = numbers[(numbers["optimisation"] == HOISTED) & (numbers["shape"] == "all")].iloc[0]
    assert row["reference_agrees"] == False  # noqa: E712 (a pandas boolean)
    own = table.comparison_numbers(metrics, spread=read(without_pooled(out, tmp_path)))
    assert row["verdict"] == own[own["optimisation"] == HOISTED]["verdict"].iloc[0]
    page = table.comparison_table(metrics, spread=read(out))
    cell = page.loc[page["optimisation"] == HOISTED, f"{RUN}: verdict"].iloc[0]
    pooled = f"{row['reference_speedup']:.3f}x ({row['reference_low']:.3f}-"
    assert f"(this run differs from this host's 4 reference runs, {row['speed']} against " in cell
    assert pooled in cell and ": judged on its own)" in cell


PERSISTENT_MS = (4.85, 5.05, 4.9, 5.0, 4.95)  # nn.LSTM at 5.0: 1.03x down to 0.99x


def test_the_persistent_targets_read_the_reference_runs_too(tmp_path, capsys):
    """The persistent rung on its 1.0x target at one thread (1.03x, 0.99x, 1.02x, 1.00x,
    1.01x in five runs): alone, the runs read the target met or inconclusive by turns. The
    spread file measures the persistent section's pairs too, and with it every run judges the
    target over the five runs' pooled speedup, which each agrees with: one verdict."""
    from rnnopt.report.experiments import persistent

    folders = runs(tmp_path, PERSISTENT_MS, "numpy-lstm-persistent", "torch-lstm-nn")
    _, _, out = spread_of(tmp_path, capsys, folders)
    candidates = pd.read_csv(out)["candidate"]
    assert candidates.str.startswith("numpy-lstm-persistent float32 cpu b16-t20").any()
    alone, pooled = [], []
    for folder in folders:
        metrics = load_run(folder)
        alone.append(persistent.numbers(metrics)["target_verdict"].iloc[0])
        row = persistent.numbers(metrics, read(out)).iloc[0]
        assert bool(row["reference_agrees"]) and row["reference_runs"] == 5
        pooled.append(row["target_verdict"])
        shown = persistent.table(metrics, read(out))["target"].iloc[0]
        assert "over this host's 5 reference runs: " in shown
    assert len(set(alone)) > 1 and len(set(pooled)) == 1
    # a later run at 1.25x lies outside what the five predict: judged on its own, and says so
    later = tmp_path / "results-later"
    write_profile(later, "numpy-lstm-persistent", 4.0)
    write_profile(later, "torch-lstm-nn", 5.0)
    row = persistent.numbers(load_run(later / RUN), read(out)).iloc[0]
    assert not row["reference_agrees"] and row["target_verdict"] == "met"
    shown = persistent.table(load_run(later / RUN), read(out))["target"].iloc[0]
    assert shown.startswith("1.00x: met (this run differs from this host's 5 reference runs, ")


def test_a_pair_at_another_phase_than_the_step_is_keyed_by_it():
    """The persistent section judges forward and step of the same two jobs: one spread each."""
    from rnnopt.report.outcomes import pair_keys

    jobs = {"variant_c": "numpy-lstm-persistent", "variant_b": "torch-lstm-nn", "dtype": "float32"}
    shape = {"device": "cpu", "batch": 16, "seq_len": 20, "input_size": 32, "hidden_size": 64}
    matched = pd.DataFrame([jobs | shape | {"threads": 2, "phase": p} for p in ("step", "forward")])
    step, forward = pair_keys(matched)
    assert step == (
        "numpy-lstm-persistent float32 cpu b16-t20-i32-h64 threads2",
        "torch-lstm-nn float32 cpu b16-t20-i32-h64 threads2",
    )
    assert forward == (f"{step[0]} forward", f"{step[1]} forward")


CACHES = {"l1d": 32 * 2**10, "l2": 2**20, "l3": 32 * 2**20}  # H=2048's 64 MiB: beyond L3
BEYOND_MS = (4.85, 4.44, 4.64, 4.51, 4.71)  # best beyond / best inside 0.66x ... 0.72x


def sweep_runs(tmp_path, beyond_ms):
    """One result set a run: a weights-vs-cache sweep (H=128, 512, 2048) whose point beyond
    L3 takes beyond_ms[i] in run i; the best inside (H=512) stays."""
    from tests.test_aggregate import CPU_RUN, ENV, Results

    folders = []
    for i, beyond in enumerate(beyond_ms):
        results = Results(tmp_path / f"sweep-{i}")
        for hidden, ms in ((128, 0.2), (512, 1.0), (2048, beyond)):
            results.profile(
                CPU_RUN, "numpy-lstm-fused", "float32", ms, env=ENV | {"cpu_caches": CACHES},
                batch=8, seq_len=2, input_size=32, hidden_size=hidden,
            )  # fmt: skip
        folders.append(tmp_path / f"sweep-{i}" / CPU_RUN)
    return folders


def test_the_weights_vs_cache_verdict_reads_the_reference_runs_too(tmp_path, capsys):
    """The sweep's ratio around its 0.7 bound (0.66x to 0.72x in five runs): alone, the runs
    read a drop supported, not supported and inconclusive by turns. The spread file measures
    the sweep's ratio too (keyed by the sweep, without readings: its rule is not the threshold
    rule), and with it every run judges the ratio pooled over the five: one verdict. A run at
    0.91x lies outside what the five predict: judged on its own, and says so."""
    from rnnopt.report.experiments import cache

    folders = sweep_runs(tmp_path, BEYOND_MS)
    status, printed, out = spread_of(tmp_path, capsys, folders)
    assert status == 0
    row = (
        pd.read_csv(out)
        .set_index("candidate")
        .loc[
            "weights vs cache numpy-lstm-fused float32 cpu b8-t2-i32 threads1 step: best beyond L3"
        ]
    )
    assert row["baseline"].endswith("threads1 step: best inside L3") and row["runs"] == 5
    assert row[["reads_faster", "reads_slower", "reads_same", "reads_inconclusive"]].isna().all()
    assert "best inside L3: between runs" in printed.out and "pooled 0.69" in printed.out
    alone, pooled = [], []
    for folder in folders:
        metrics = load_run(folder)
        run = metrics["run"].iloc[0]
        alone.append(cache.cache_rows(metrics, run)[0]["verdict"].split(":")[0])
        verdict = cache.cache_rows(metrics, run, read(out)[run])[0]["verdict"]
        assert "over this host's 5 reference runs, this run 0.6" in verdict or (
            "over this host's 5 reference runs, this run 0.7" in verdict
        )
        pooled.append(verdict.split(":")[0])
    assert set(alone) == {"supported", "not supported", "inconclusive"}
    assert set(pooled) == {"inconclusive"}
    (later,) = sweep_runs(tmp_path / "later", (3.5,))
    metrics = load_run(later)
    verdict = cache.cache_rows(metrics, metrics["run"].iloc[0], read(out)[metrics["run"].iloc[0]])
    assert verdict[0]["verdict"].startswith("not supported: no drop at the L3 boundary (0.91x")
    assert "(this run differs from this host's 5 reference runs, 0.91x" in verdict[0]["verdict"]
