"""rnnopt.report on synthetic records of a CPU run and a CUDA run (tests.test_aggregate)."""

from __future__ import annotations

import math
import re

import matplotlib.image
import numpy as np
import pandas as pd
import pytest
from scipy import stats

from rnnopt.cli import main
from rnnopt.report import table, wide
from rnnopt.report.aggregate import collect
from rnnopt.report.build import build
from rnnopt.report.comparisons import COMPARISONS, Comparison, Side
from rnnopt.report.figures import FIGURES, draw_all
from rnnopt.report.intervals import Interval
from rnnopt.report.outcomes import Outcome, measure
from rnnopt.report.verdicts import verdict
from tests.test_aggregate import CPU_RUN, ENV, GPU_RUN, Results, write_results


@pytest.fixture(scope="module")
def frames(tmp_path_factory):
    root = tmp_path_factory.mktemp("report") / "results"
    write_results(root)
    return collect(root)


@pytest.fixture(scope="module")
def comparison(frames):
    return table.comparison_table(frames[0]).set_index("optimisation")


def cell(comparison, optimisation, run, column):
    return comparison.loc[optimisation, f"{run}: {column}"]


def test_one_row_per_comparison_and_hosts_side_by_side(comparison):
    assert list(comparison.index) == [c.optimisation for c in COMPARISONS]
    for run in (CPU_RUN, GPU_RUN):
        for column in ("speedup", "peak memory", "loss", "verdict"):
            assert f"{run}: {column}" in comparison.columns
    assert comparison.loc["GPU", "claim"] == "C9"


def test_speedup_median_and_interval(comparison):
    text = cell(comparison, "vectorisation / batching", CPU_RUN, "speedup")
    assert text.startswith("10.00x (")  # 100 ms naive / 10 ms batched, IQR 4% each
    low, high = (float(x) for x in text.split("(")[1].rstrip(")").split("-"))
    assert low < 10 < high
    assert cell(comparison, "vectorisation / batching", CPU_RUN, "verdict") == "supported"
    assert cell(comparison, "float32 instead of float64", CPU_RUN, "peak memory") == "0.50x"


def test_gpu_rows_measured_on_the_cuda_run_only(comparison):
    assert cell(comparison, "GPU", GPU_RUN, "verdict") == "supported"
    assert cell(comparison, "GPU", GPU_RUN, "speedup").startswith("12.00x")
    cpu_verdict = cell(comparison, "GPU", CPU_RUN, "verdict")
    assert cpu_verdict.startswith("not measured here: skipped:")
    assert "no CUDA device" in cpu_verdict
    assert cell(comparison, "mixed precision (float16, CUDA)", GPU_RUN, "verdict") == "supported"


def test_failed_verification_gets_no_verdict(comparison):
    verdict_text = cell(comparison, "TorchScript", CPU_RUN, "verdict")
    assert verdict_text == "not measured here: failed verification: torch-lstm-jit float32 cpu"


def test_training_experiments(comparison):
    loss = "diverged -> 0.04 (24% of baseline)"  # the held-out loss, baseline 0.17
    assert cell(comparison, "gradient clipping", CPU_RUN, "loss") == loss
    assert cell(comparison, "gradient clipping", CPU_RUN, "verdict") == "supported"
    # clip-off's 7 steps before it diverged are warm-up: no step time against clip-on's 20
    no_time = "- (no step time compared: clip-off stopped after 7 steps)"
    assert cell(comparison, "gradient clipping", CPU_RUN, "speedup") == no_time
    assert cell(comparison, "gradient accumulation", CPU_RUN, "peak memory") == "0.25x"
    assert cell(comparison, "gradient accumulation", CPU_RUN, "verdict") == "supported"
    assert cell(comparison, "batch-size choice", CPU_RUN, "speedup").startswith("B=128")
    assert cell(comparison, "batch-size choice", CPU_RUN, "verdict") == "supported"
    assert cell(comparison, "gradient clipping", GPU_RUN, "verdict").startswith("not measured")


def set_step_times(train: pd.DataFrame, setting: str, times) -> None:
    """The step times of a training run's processes (what wide.collapse_train_processes
    reads from its records)."""
    train["process_times"] = train["process_times"].astype(object)
    for row in train.index[train["setting"] == setting]:
        train.at[row, "process_times"] = tuple(times)


def test_clipping_compares_step_times_when_both_runs_took_every_step(frames):
    data = table.run_data(frames[0])[CPU_RUN]
    clip_off = data.train["setting"] == "clip-off"
    data.train.loc[clip_off, ["status", "steps_completed"]] = ["ok", 20]
    set_step_times(data.train, "clip-off", [11.0])
    data.train.loc[clip_off, "heldout_loss"] = 0.1
    clipping = next(c for c in COMPARISONS if c.method == "clipping")
    outcome = measure(clipping, data, CPU_RUN)
    assert str(outcome.speedup) == "1.10x"  # 11 ms unclipped / 10 ms clipped
    assert outcome.stability == (True, "clip-on reached a lower held-out loss")


def test_a_training_run_is_one_row_with_its_processes_step_times(tmp_path):
    """A training run's median step moved 0.91-1.25 ms from run to run for one job, its 10th
    percentile 0.89-0.91: a process counts by its fast steps (time_per_step_q10_ms) where the
    record has them, by its median step in a record before them; the batch-size runs train in
    several processes, one row each run."""
    results = Results(tmp_path / "results")
    for process, (median, fast) in enumerate(((2.5, 2.4), (2.7, 2.6), (2.6, None))):
        results.train(
            CPU_RUN, "batch-16", "torch-lstm-nn", 0.04, batch=16, time_ms=median,
            fast_ms=fast, process=process,
        )  # fmt: skip
    results.train(CPU_RUN, "clip-on", "torch-lstm-nn", 0.04, time_ms=6.0)  # before --process
    metrics = collect(tmp_path / "results")[0]
    each = wide.records(metrics, "train", per_process=True)
    assert sorted(each["process"]) == [0, 0, 1, 2]
    train = wide.records(metrics, "train").set_index("setting")
    assert train.loc["batch-16", "process_times"] == (2.4, 2.6, 2.6)  # p2 has no q10: median
    assert train.loc["batch-16", "processes"] == 3
    assert train.loc["clip-on", "process_times"] == (6.0,)


def test_training_speeds_divide_their_processes_step_times(frames):
    data = table.run_data(frames[0])[CPU_RUN]
    train = data.train
    clip_off = train["setting"] == "clip-off"
    train.loc[clip_off, ["status", "steps_completed"]] = ["ok", 20]
    train.loc[clip_off, "heldout_loss"] = 0.1
    fast = {"clip-off": 9.0, "clip-on": 6.0, "accum-1x64": 6.0, "accum-4x16": 20.0}
    fast |= {"batch-8": 2.5, "batch-32": 6.0, "batch-128": 10.0}
    for setting, time_ms in fast.items():
        set_step_times(train, setting, [time_ms])
    by_method = {c.method: c for c in COMPARISONS}
    assert str(measure(by_method["clipping"], data, CPU_RUN).speedup) == "1.50x"  # 9 / 6
    assert str(measure(by_method["accumulation"], data, CPU_RUN).speedup) == "0.30x"  # 6 / 20
    batch = measure(by_method["batch_size"], data, CPU_RUN)
    # B=128: 128 / 10 ms against B=8: 8 / 2.5 ms; one process a run: no interval
    assert batch.speed_text == "B=128: 4.00x tokens/s of B=8"


def test_the_batch_size_gain_carries_the_interval_of_its_processes(frames):
    """Tokens/s of B=128 over B=8 is 16 x (B=8's step time / B=128's): the interval is
    Welch's over the processes' log step times (scipy's, by hand here), times 16."""
    data = table.run_data(frames[0])[CPU_RUN]
    small, large = (2.5, 2.6, 2.4), (10.0, 10.6, 9.7)
    set_step_times(data.train, "batch-8", small)
    set_step_times(data.train, "batch-32", (6.0, 6.2, 6.1))
    set_step_times(data.train, "batch-128", large)
    batch_size = next(c for c in COMPARISONS if c.method == "batch_size")
    outcome = measure(batch_size, data, CPU_RUN)
    logs = np.log(small), np.log(large)
    welch = stats.ttest_ind(*logs, equal_var=False).confidence_interval(0.95)
    estimate = 16 * math.exp(logs[0].mean() - logs[1].mean())
    assert outcome.throughput.median == pytest.approx(estimate)
    assert outcome.throughput.low == pytest.approx(16 * math.exp(welch.low))
    assert outcome.throughput.high == pytest.approx(16 * math.exp(welch.high))
    assert outcome.throughput.processes == (3, 3)
    assert outcome.speed_text == f"B=128: {outcome.throughput} tokens/s of B=8"
    assert verdict(batch_size, outcome) == "supported"


@pytest.mark.parametrize(
    ("gain", "found"),
    [
        (Interval(1.2, 1.10, 1.3, (3, 3)), "supported"),  # the whole interval at least 1.1x
        (Interval(1.2, 1.09, 1.3, (3, 3)), "inconclusive: best batch 1.20x (1.09-1.30) the"),
        (Interval(1.05, 1.0, 1.0999, (3, 3)), "not supported: throughput flat"),
        (Interval(1.2), "supported"),  # one process a run (older runs): the ratio alone
        (Interval(1.05), "not supported: throughput flat over batch sizes (1.05x)"),
    ],
)
def test_the_batch_size_verdict_reads_the_whole_interval(gain, found):
    batch_size = next(c for c in COMPARISONS if c.method == "batch_size")
    outcome = Outcome(throughput=gain, heldout_ratios={"batch-8": 0.1, "batch-128": 0.1})
    assert verdict(batch_size, outcome).startswith(found)


def test_a_run_that_did_not_learn_fails_the_learned_criterion():
    accumulation = next(c for c in COMPARISONS if c.method == "accumulation")
    outcome = Outcome(memory_ratio=0.5, loss_change=0.01)
    outcome.heldout_ratios = {"accum-1x64": 0.05, "accum-4x16": 0.9}
    text = verdict(accumulation, outcome)
    assert text.startswith("not supported: did not learn: accum-4x16 90%")
    outcome.heldout_ratios["accum-4x16"] = 0.06
    assert verdict(accumulation, outcome) == "supported"


def test_gc_claim_not_supported_when_pauses_are_negligible(comparison):
    text = cell(comparison, "fewer temporaries, less garbage collection", CPU_RUN, "verdict")
    assert text.startswith("not supported: GC pauses only")


SPEED = Comparison("x", ("C0",), Side("a"), Side("b"))
BOTH = Comparison("x", ("C0",), Side("a"), Side("b"), criteria=("speed", "memory"))


@pytest.mark.parametrize(
    ("spec", "outcome", "expected"),
    [
        (SPEED, Outcome(speedup=Interval(2.0, 1.5, 2.5)), "supported"),
        # the 5% threshold: faster only when the whole interval is above 1.05
        (SPEED, Outcome(speedup=Interval(1.1, 1.051, 1.2)), "supported"),
        (SPEED, Outcome(speedup=Interval(1.1, 1.049, 1.2)), "inconclusive: 1.10x (1.05-1.20)"),
        (SPEED, Outcome(speedup=Interval(1.05, 0.9, 1.2)), "inconclusive: 1.05x (0.90-1.20)"),
        (SPEED, Outcome(speedup=Interval(1.0, 0.96, 1.04)), "not supported: no meaningful"),
        (SPEED, Outcome(speedup=Interval(0.9, 0.85, 0.94)), "not supported: slower (0.90x"),
        (SPEED, Outcome(speedup=Interval(0.5, 0.4, 0.6)), "not supported: slower (0.50x"),
        (SPEED, Outcome(speedup=Interval(3.0)), "not judged: 3.00x: one process a side"),
        (SPEED, Outcome(missing=["no profile records of a"]), "not measured here: no profile"),
        (BOTH, Outcome(speedup=Interval(2, 1.5, 2.5), memory_ratio=0.5), "supported"),
        (BOTH, Outcome(speedup=Interval(2, 1.5, 2.5), memory_ratio=1.0), "not supported: peak"),
        (BOTH, Outcome(speedup=Interval(2, 1.5, 2.5)), "supported (memory not measured)"),
        (
            SPEED,
            Outcome(speedup=Interval(2, 1.5, 2.5), unverified=["a f32 cpu"]),
            "not measured here: failed verification: a f32 cpu",
        ),
    ],
)
def test_verdict_rules(spec, outcome, expected):
    assert verdict(spec, outcome).startswith(expected)


def test_verification_table_shows_failures_and_skips(frames):
    verification = table.verification_table(frames[0]).set_index(["variant", "dtype", "device"])
    assert verification.loc[("torch-lstm-jit", "float32", "cpu"), CPU_RUN].startswith("FAIL")
    skipped = verification.loc[("torch-lstm-nn", "float32", "cuda")]
    assert skipped[CPU_RUN].startswith("skipped:") and skipped[GPU_RUN].startswith("pass")


def test_variants_table_flags(frames):
    variants = table.variants_table(frames[0])
    jit = variants[variants["variant"] == "torch-lstm-jit"].iloc[0]
    assert jit["verified"] == "FAILED"
    skipped = variants[variants["status"].str.startswith("skipped")]
    assert set(skipped["device"]) == {"cuda"}
    assert (variants[variants["status"] == "ok"]["tokens/s"] != "-").all()


def test_figures_are_drawn_pngs(frames, tmp_path):
    missing = draw_all(*frames, tmp_path)
    assert missing == {name: "" for name in FIGURES}
    for name in FIGURES:
        path = tmp_path / f"{name}.png"
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert path.stat().st_size > 20_000
        height, width = matplotlib.image.imread(path).shape[:2]
        assert width >= 600 and height >= 400


def test_figures_without_data_say_why(tmp_path):
    root = tmp_path / "results"
    (root / "run").mkdir(parents=True)
    metrics, series = collect(root)
    missing = draw_all(metrics, series, tmp_path / "figures")
    assert all(missing.values())
    assert all((tmp_path / "figures" / f"{name}.png").is_file() for name in FIGURES)


def test_build_writes_markdown_html_and_csv(frames, tmp_path):
    paths = build(*frames, tmp_path)
    markdown = paths["markdown"].read_text()
    assert f"{CPU_RUN}: verdict" in markdown and f"{GPU_RUN}: verdict" in markdown
    assert "## Verification" in markdown and "![speedup](figures/speedup.png)" in markdown
    html = paths["html"].read_text()
    assert "<table" in html and 'src="figures/roofline.png"' in html
    numbers = pd.read_csv(paths["comparison"])
    whole = numbers[numbers["shape"] == table.ALL_SHAPES]
    assert len(whole) == 2 * len(COMPARISONS)  # every comparison in both runs
    assert list(numbers.columns) == list(table.COMPARISON_COLUMNS)
    batching = whole.set_index(["optimisation", "run"]).loc[("vectorisation / batching", CPU_RUN)]
    assert batching["speedup"] == pytest.approx(10.0, rel=1e-3)
    assert batching["low"] < 10 < batching["high"] and batching["processes"] == 3
    assert batching["category"] == "supported"
    variants = pd.read_csv(paths["variants"])
    assert variants["time_ms"].dtype == float and variants["processes"].max() == 3


def test_cli_report_with_aggregate(tmp_path, capsys):
    write_results(tmp_path / "results")
    out = tmp_path / "results" / "report"
    assert main(["report", "--aggregate", str(tmp_path / "results"), "--out", str(out)]) == 0
    assert "supported" in capsys.readouterr().out
    assert (tmp_path / "results" / "metrics.parquet").is_file()
    assert (out / "comparison.md").is_file() and (out / "figures" / "speedup.png").is_file()


def test_published_gpu_figures_beside_the_cuda_run_at_the_same_shape(tmp_path):
    from rnnopt.report import published
    from tests.test_aggregate import GPU_ENV, Results

    results = Results(tmp_path)
    deepbench = {"batch": 64, "seq_len": 25, "input_size": 512, "hidden_size": 512}
    for dtype, median in (("float32", 0.9), ("float16", 0.4)):
        results.profile(
            GPU_RUN,
            "torch-lstm-nn",
            dtype,
            median,
            device="cuda",
            phase="forward",
            env=GPU_ENV,
            **deepbench,
        )
    # another shape, and a step: neither belongs to the published rows
    results.profile(GPU_RUN, "torch-lstm-nn", "float32", 5.0, device="cuda", env=GPU_ENV)
    frame = published.table(collect(tmp_path)[0])
    assert list(frame["source"]) == [
        published.SOURCE,
        f"{GPU_RUN} (Test GPU), torch-lstm-nn",
        published.SOURCE,  # H=1024: published, not measured here
    ]
    ours = frame.iloc[1]
    assert (ours["float32 ms"], ours["float16 ms"], ours["tfloat32 ms"]) == ("0.9", "0.4", "-")
    assert frame.iloc[0]["float32 ms"] == "1.34" and frame.iloc[2]["float16 ms"] == "1.39"


def test_roofline_ceilings_per_device():
    from rnnopt.report.roofline import gemm_ceilings

    peak = pd.Series(
        {
            "gemm_gflops.numpy.float32": 90.0,
            "gemm_gflops.torch.float32": 95.0,
            "gemm_gflops.cuda.float32": 50000.0,
            "gemm_gflops.cuda.tfloat32": 350000.0,
        }
    )
    assert gemm_ceilings(peak, "cpu") == {"float32": (95.0, "torch")}
    cuda = {"float32": (50000.0, "cuda"), "tfloat32": (350000.0, "cuda")}
    assert gemm_ceilings(peak, "cuda") == cuda


def test_loss_curves_of_two_runs_drawn_per_run(tmp_path):
    from rnnopt.report.figures import Frames, loss_curves
    from tests.test_aggregate import GPU_ENV, Results

    results = Results(tmp_path)
    results.train(CPU_RUN, "base", "torch-lstm-nn", 0.05)
    results.train(GPU_RUN, "base", "torch-lstm-nn", 0.06, env=GPU_ENV)
    fig = loss_curves(Frames.of(*collect(tmp_path)))
    left, right = fig.axes[:2]
    assert len(left.lines) >= 2 and len(right.lines) >= 2  # one curve per run, on both sides


def test_a_jobs_processes_collapse_to_one_row(tmp_path):
    """Profile records of one job in three processes are one row: geometric mean of the
    medians, the process medians kept for the interval; a failed process is left out of the
    numbers, and a job with no ok process keeps its status and reason."""
    from rnnopt.report import wide
    from tests.test_aggregate import Results

    results = Results(tmp_path / "results")
    results.profile(CPU_RUN, "numpy-lstm-fused", "float32", 2.0, processes=(1.0, 4.0))
    results._profile_process(
        CPU_RUN,
        "numpy-lstm-fused",
        "float32",
        0,
        2,
        device="cpu",
        phase="step",
        threads=1,
        status="failed",
        reason="RuntimeError: boom",
        env=ENV,
        compile_s=None,
        gc_pause_ms=0.0,
    )
    results.profile(CPU_RUN, "torch-lstm-nn", "float32", 0, status="skipped", reason="why")
    metrics, _ = collect(tmp_path / "results")
    assert len(wide.records(metrics, "profile", per_process=True)) == 3 + 3
    rows = wide.records(metrics, "profile").set_index("variant")
    fused = rows.loc["numpy-lstm-fused"]
    assert fused["status"] == "ok" and fused["processes"] == 2
    assert fused["time_ms.median"] == pytest.approx(4.0)  # sqrt(2 x 8)
    assert fused["process_medians"] == (2.0, 8.0)
    assert fused["time_ms.iqr"] == pytest.approx(0.04 * 5.0)  # the median of 0.08 and 0.32
    skipped = rows.loc["torch-lstm-nn"]
    assert (skipped["status"], skipped["reason"], skipped["processes"]) == ("skipped", "why", 0)


def test_record_strings_cannot_break_the_markdown(tmp_path):
    """A failure's reason is any text: HTML, `|` and newlines reached comparison.md as they
    were and broke its tables (issue 23, item 20); the HTML page escapes them too."""
    from tests.test_aggregate import Results

    results = Results(tmp_path / "results")
    reason = "RuntimeError: <script>alert(1)</script> a|b\nsecond line"
    results.profile(CPU_RUN, "numpy-lstm-fused", "float32", 1.0)
    results.profile(CPU_RUN, "numpy-lstm-naive", "float64", 0, status="failed", reason=reason)
    paths = build(*collect(tmp_path / "results"), tmp_path / "report")
    markdown = paths["markdown"].read_text()
    assert "<script>" not in markdown
    assert "&lt;script>alert(1)&lt;/script> a\\|b second line" in markdown
    for rows in re.findall(r"(?:^\|.*\|\n)+", markdown, flags=re.MULTILINE):
        widths = {len(re.findall(r"(?<!\\)\|", line)) for line in rows.splitlines()}
        assert len(widths) == 1, rows  # every row of a table has the header's columns
    assert "<script>" not in paths["html"].read_text()


def test_a_process_timed_in_a_slow_spell_is_left_out(tmp_path):
    """One process of a job ran 2x slower, and so did its speed probe: the job's time and
    interval come from the other two. Two disturbed processes of three are all kept (one
    would be too few), as is everything of records without a probe."""
    from rnnopt.report import wide
    from tests.test_aggregate import Results

    results = Results(tmp_path / "results")
    spell = {"processes": (1.0, 1.0, 2.0), "probes": (1.0, 1.0, 2.0)}
    results.profile(CPU_RUN, "numpy-lstm-fused", "float32", 2.0, **spell)
    long_spell = {"processes": (1.0, 2.0, 2.0), "probes": (1.0, 2.0, 2.0)}
    results.profile(CPU_RUN, "numpy-lstm-batched", "float32", 3.0, **long_spell)
    results.profile(CPU_RUN, "numpy-lstm-naive", "float64", 30.0)
    metrics, _ = collect(tmp_path / "results")
    rows = wide.records(metrics, "profile").set_index("variant")
    fused = rows.loc["numpy-lstm-fused"]
    assert (fused["processes"], fused["disturbed"]) == (2, 1)
    assert fused["process_medians"] == (2.0, 2.0) and fused["time_ms.median"] == pytest.approx(2)
    assert rows.loc["numpy-lstm-batched", "processes"] == 3
    assert rows.loc["numpy-lstm-batched", "disturbed"] == 0
    variants = table.variants_table(metrics).set_index("variant")
    assert "1 slow spell left out" in variants.loc["numpy-lstm-fused", "time ms (process range)"]


def test_a_spell_that_began_during_the_timing_loop_is_left_out_if_it_slowed_the_process(
    tmp_path,
):
    """Only the probe after the timing loop read slow: the spell began during the loop. The
    process is left out where its time is also above 1.10x its job's other processes (fused,
    1.6x), and kept where it is not (batched, 1.03x: the spell came after its calls)."""
    from rnnopt.report import wide
    from tests.test_aggregate import Results

    results = Results(tmp_path / "results")
    began = (1.0, 1.0, (1.0, 1.5))
    results.profile(
        CPU_RUN, "numpy-lstm-fused", "float32", 2.0, processes=(1.0, 1.02, 1.6), probes=began
    )
    results.profile(
        CPU_RUN, "numpy-lstm-batched", "float32", 3.0, processes=(1.0, 1.02, 1.03), probes=began
    )
    results.profile(CPU_RUN, "numpy-lstm-naive", "float64", 30.0)
    metrics, _ = collect(tmp_path / "results")
    rows = wide.records(metrics, "profile").set_index("variant")
    fused = rows.loc["numpy-lstm-fused"]
    assert (fused["processes"], fused["disturbed"]) == (2, 1)
    assert rows.loc["numpy-lstm-batched", "processes"] == 3
    assert rows.loc["numpy-lstm-batched", "disturbed"] == 0


def test_a_slow_process_is_judged_against_its_jobs_processes_outside_the_spell(tmp_path):
    """Run S: three of six processes of a job ran whole in a spell (both probes high), and
    one more, with its first probe high, 41% slower than the job's clean processes but not
    10% slower than the median of all its others: it is left out, the spell's three too."""
    from rnnopt.report import wide
    from tests.test_aggregate import Results

    results = Results(tmp_path / "results")
    times = (1.41, 1.0, 1.36, 0.99, 1.58, 1.56)
    probes = ((1.5, 0.84), (0.84, 1.44), 1.69, 1.0, 1.5, 1.56)
    results.profile(CPU_RUN, "numpy-lstm-batched", "float32", 2.0, processes=times, probes=probes)
    results.profile(CPU_RUN, "numpy-lstm-naive", "float64", 30.0)
    metrics, _ = collect(tmp_path / "results")
    batched = wide.records(metrics, "profile").set_index("variant").loc["numpy-lstm-batched"]
    assert (batched["processes"], batched["disturbed"]) == (2, 4)
    assert batched["process_medians"] == pytest.approx((2.0, 1.98))


def test_a_process_counts_in_speedups_by_its_fast_calls(tmp_path):
    """A slow spell over most of one process's timing loop doubles its median but not the
    2nd percentile of its calls, which is what speedups use (docs/intervals.md); records
    without their calls (older runs) count by their median. A process whose CPU was contended
    for all but 4% of its calls (a busy hyperthread sibling on the host: a 1.3x slower mode)
    counts by its fast calls too, where the 10th percentile would be the slow mode's."""
    import json

    from rnnopt.report import wide
    from tests.test_aggregate import Results

    results = Results(tmp_path / "results")
    results.profile(CPU_RUN, "numpy-lstm-fused", "float32", 2.0, processes=(1.0, 1.0, 2.0))
    results.profile(CPU_RUN, "numpy-lstm-batched", "float32", 3.0, processes=(1.0, 1.0, 1.0))
    for path in (tmp_path / "results").rglob("*numpy-lstm-fused*/**/step-*.json"):
        record = json.loads(path.read_text())
        spell = record["process"] == 2
        record["metrics"]["samples_ms"] = [2.0] * 40 + [4.0 if spell else 2.0] * 60
        path.write_text(json.dumps(record))
    for path in (tmp_path / "results").rglob("*numpy-lstm-batched*/**/step-*.json"):
        record = json.loads(path.read_text())
        if record["process"] == 1:
            record["metrics"]["samples_ms"] = [3.0] * 4 + [3.9] * 96
            path.write_text(json.dumps(record))
    metrics, _ = collect(tmp_path / "results")
    rows = wide.records(metrics, "profile").set_index("variant")
    fused = rows.loc["numpy-lstm-fused"]
    assert fused["process_medians"] == (2.0, 2.0, 4.0)
    assert fused["process_times"] == (2.0, 2.0, 2.0)
    assert fused["time_ms.q2"] == pytest.approx(2.0)
    # processes 0 and 2 kept no calls: their medians; process 1 its fast calls, not 3.9
    assert rows.loc["numpy-lstm-batched", "process_times"] == pytest.approx((3.0, 3.0, 3.0))


def test_scan_section_pairs_loop_and_scan_per_length_beside_nn_lstm(tmp_path):
    """The S7 table: per T, the loop's and the scan's step time, the scan's speedup, nn.LSTM
    at the same sizes and the memray peak ratio; the paper's rows after ours; the S7
    comparison row judges each T apart; the figure draws the sweep."""
    from rnnopt.report.experiments import scan
    from tests.test_aggregate import Results

    results = Results(tmp_path / "results")
    sizes = {"batch": 16, "input_size": 32, "hidden_size": 64}
    for seq_len, loop_ms, scan_ms in ((64, 2.0, 8.0), (512, 16.0, 4.0)):
        at = sizes | {"seq_len": seq_len}
        results.profile(CPU_RUN, "numpy-mingru-seq", "float32", loop_ms, **at)
        results.profile(CPU_RUN, "numpy-mingru-scan", "float32", scan_ms, **at)
        results.profile(CPU_RUN, "torch-lstm-nn", "float32", 10.0, processes=(1.0,), **at)
        results.memory(CPU_RUN, "numpy-mingru-seq", "float32", 1.0, **at)
        results.memory(CPU_RUN, "numpy-mingru-scan", "float32", 3.0, **at)
    metrics, _ = collect(tmp_path / "results")
    frame = scan.table(metrics)
    ours = frame[frame["run"] == CPU_RUN].set_index("T")
    assert list(ours.index) == [64, 512]
    assert ours.loc[64, "scan vs loop"] == "0.25x" and ours.loc[512, "scan vs loop"] == "4.00x"
    assert ours.loc[512, "nn.LSTM ms"] == "10" and ours.loc[512, "scan vs nn.LSTM"] == "2.50x"
    assert set(ours["scan peak / loop peak"]) == {"3.00x"}
    assert list(frame["run"])[2:] == [scan.PUBLISHED] * len(scan.PUBLISHED_SPEEDUPS)

    numbers = table.comparison_numbers(metrics)
    row = numbers[numbers["optimisation"] == "parallel scan (minGRU, minLSTM; NumPy)"]
    by_shape = row.set_index("shape")["speedup"]
    assert by_shape["B16 T64 I32 H64"] == pytest.approx(0.25, rel=0.02)
    assert by_shape["B16 T512 I32 H64"] == pytest.approx(4.0, rel=0.02)
    assert row.set_index("shape").loc["all", "verdict"].startswith("depends on the shape")

    drawn = scan.draw(metrics, tmp_path / "figures")
    assert drawn == {"scan_vs_seq_len": ""}
    assert scan.training_table(metrics).empty
    assert matplotlib.image.imread(tmp_path / "figures" / "scan_vs_seq_len.png").shape[0] > 100


def test_scan_training_rows_beside_nn_lstm(tmp_path):
    from rnnopt.report.experiments import scan
    from tests.test_aggregate import Results

    results = Results(tmp_path / "results")
    results.train(CPU_RUN, "base", "torch-lstm-nn", 0.01)
    results.train(CPU_RUN, "base", "numpy-mingru-scan", 0.02)
    results.train(CPU_RUN, "base", "numpy-minlstm-scan", 0.1)
    results.train(CPU_RUN, "base", "numpy-minlstm-seq", 0.02, steps=10)  # no nn.LSTM at 10
    metrics, _ = collect(tmp_path / "results")
    rows = scan.training_table(metrics).set_index("variant")
    assert list(rows.loc["numpy-mingru-scan", ["learned", "vs nn.LSTM"]]) == ["yes", "2.00x"]
    assert rows.loc["numpy-mingru-scan", "of predict-the-mean"] == f"{0.02 / 0.17:.1%}"
    assert rows.loc["numpy-minlstm-scan", "learned"] == "no"  # 59% of predict-the-mean
    assert rows.loc["numpy-minlstm-seq", "vs nn.LSTM"] == "-"


def test_persistent_section_judges_each_row_against_its_target(tmp_path):
    """Per thread count and phase: nn.LSTM / the persistent rung with its interval, 1.0x on one
    thread and 1.15x on more as targets, met only when the whole interval reaches them; the
    W_hh slice per thread against the L2; what the GEMM ceiling would allow."""
    from rnnopt.report.experiments import persistent
    from tests.test_aggregate import ENV, Results

    results = Results(tmp_path / "results")
    env = ENV | {"cpu_caches": {"l1d": 2**15, "l2": 2**20, "l3": 2**25}}
    fastrnns = {"batch": 64, "seq_len": 100, "input_size": 512, "hidden_size": 512}
    small = {"batch": 8, "seq_len": 100, "input_size": 256, "hidden_size": 256}
    for phase in ("forward", "step"):
        for threads, ms, shape, spread in (
            (1, 0.9, fastrnns, (0.99, 1.0, 1.01)),  # 1.11x: met (1.0x)
            (2, 1.0, fastrnns, (0.99, 1.0, 1.01)),  # 1.10x: not met (1.15x)
            (2, 0.87, small, (0.8, 1.0, 1.25)),  # 1.15x, wide: inconclusive
        ):
            at = {"phase": phase, "threads": threads, "env": env, **shape}
            results.profile(CPU_RUN, "numpy-lstm-persistent", "float32", ms, processes=spread, **at)
            results.profile(CPU_RUN, "torch-lstm-nn", "float32", 1.0 if threads == 1 else 1.1, **at)
    metrics, _ = collect(tmp_path / "results")
    numbers = persistent.numbers(metrics).set_index(["shape", "threads", "phase"])
    one = numbers.loc[("B64 T100 I512 H512", 1, "step")]
    assert one["speedup"] == pytest.approx(1 / 0.9, rel=1e-3) and one["low"] > 1.0
    assert (one["target"], one["target_verdict"]) == (1.0, "met")
    two = numbers.loc[("B64 T100 I512 H512", 2, "forward")]
    assert (two["target"], two["target_verdict"]) == (1.15, "not met") and two["high"] < 1.15
    wide_spread = numbers.loc[("B8 T100 I256 H256", 2, "step")]
    assert wide_spread["target_verdict"] == "inconclusive"
    assert wide_spread["low"] < 1.15 < wide_spread["high"]
    # W_hh 4 MiB over 2 threads does not fit a 1 MiB L2; H=256's 512 KiB slice does
    assert not two["fits_l2"] and wide_spread["fits_l2"]
    assert two["w_hh_per_thread_bytes"] == 2 * 2**20
    # the fake records run at 10% of the ceiling: at the ceiling, 10x faster
    assert two["speedup_at_ceiling"] == pytest.approx(10 * two["speedup"], rel=1e-3)
    shown = persistent.table(metrics)
    assert len(shown) == 6 and set(shown["target"]) >= {"1.00x: met", "1.15x: not met"}
    assert "not met" in shown.to_string() and "fits L2" in shown.to_string()
    assert "stays below the 85% target" in persistent.best_rung(metrics)


@pytest.mark.parametrize(
    ("spelled", "category"),
    [
        ("numpy-lstm-fused", "inconclusive"),  # the candidate slowed: "slower" rests on it
        ("numpy-lstm-batched", "not supported"),  # the baseline slowed: "slower" holds anyway
    ],
)
def test_a_verdict_a_kept_spell_could_have_made_is_not_decided(tmp_path, spelled, category):
    """Run AC: all three of TorchScript's processes ran in slow spells, the report kept them
    (none clean to leave two), and TorchScript read *not supported: slower*, 0.71x
    (0.55-0.91), where the other runs measured 1.09-1.10x. A spell only slows, so a speedup
    whose candidate it slowed is biased down: "slower" then rests on nothing and the verdict
    is inconclusive; a spell on the baseline's side biases the other way, and "slower" holds."""
    from rnnopt.report import wide
    from tests.test_aggregate import Results

    results = Results(tmp_path / "results")
    times = {"numpy-lstm-fused": 2.0, "numpy-lstm-batched": 1.6}  # 0.80x
    steady = (1.0, 1.01, 0.99)
    for variant, ms in times.items():
        probes = (1.6, 1.6, 1.6) if variant == spelled else None
        results.profile(CPU_RUN, variant, "float32", ms, processes=steady, probes=probes)
    results.profile(CPU_RUN, "numpy-lstm-naive", "float64", 30.0)
    results.profile(CPU_RUN, "numpy-lstm-naive", "float32", 30.0)
    metrics, _ = collect(tmp_path / "results")
    rows = wide.records(metrics, "profile").set_index("variant")
    assert rows.loc[spelled, "spell_kept"] == 3 and rows.loc[spelled, "disturbed"] == 0
    found = table.comparison_numbers(metrics)
    mine = (found["optimisation"] == "hoisted input projection") & (found["run"] == CPU_RUN)
    row = found[mine].iloc[0]
    assert row["high"] < 1 / 1.05  # the interval alone says slower
    assert row["category"] == category
    if category == "inconclusive":
        assert "a slow spell of the host slowed" in row["verdict"]


@pytest.mark.parametrize(
    ("slowed", "found", "could"),
    [
        ((1, 0), "faster", True),
        ((0, 1), "faster", False),
        ((0, 1), "slower", True),
        ((1, 0), "slower", False),
        ((1, 0), "no meaningful difference", True),
        ((0, 1), "no meaningful difference", True),
        ((0, 0), "faster", False),
        ((1, 1), "inconclusive", False),
    ],
)
def test_which_classifications_a_spell_could_make(slowed, found, could):
    """A spell slows the side it hits: the baseline's (numerator) moves a speedup up, the
    candidate's down. Only a finding in the direction of the bias rests on it."""
    assert Interval(1.0, 0.9, 1.1, (3, 3), spell_slowed=slowed).spell_could_make(found) is could
