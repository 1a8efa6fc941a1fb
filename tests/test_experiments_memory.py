"""Weights vs cache, GC churn and precision (issue 10, parts 3-5): the instruments, the
commands' records and the verdict rules of rnnopt.report.experiments (cache, churn, precision)."""

from __future__ import annotations

import gc
import json
import re

import numpy as np
import pandas as pd
import pytest

import rnnopt
from rnnopt.cli import main
from rnnopt.cli.churn import object_counts
from rnnopt.experiments.precision import growth, long_sequence_errors
from rnnopt.measure.caches import from_lscpu, from_sysfs, parse_size
from rnnopt.pipeline import config_check
from rnnopt.report.aggregate import collect
from rnnopt.report.build import build
from rnnopt.report.experiments import cache, churn, precision
from rnnopt.report.experiments.memory import FIGURES
from tests.conftest import small_problem

TINY = ["--batch", "2", "--seq-len", "3", "--input-size", "4", "--hidden-size", "5"]
FAST = ["--min-time-s", "0.01", "--min-calls", "2", "--max-warmup-calls", "2"]


# ---------------------------------------------------------------- cache sizes


@pytest.mark.parametrize(
    "text, expected", [("32K", 32768), ("1024K", 2**20), ("32 MiB", 2**25), ("65536", 65536)]
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


def test_parse_size_rejects_other_text():
    with pytest.raises(ValueError, match="not a cache size"):
        parse_size("big")


def test_sysfs_levels_keep_data_and_unified_caches(tmp_path):
    for index, (level, kind, size) in enumerate(
        [
            (1, "Data", "48K"),
            (1, "Instruction", "32K"),
            (2, "Unified", "2048K"),
            (3, "Unified", "96M"),
        ]
    ):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        for name, value in (("level", level), ("type", kind), ("size", size)):
            (folder / name).write_text(f"{value}\n")
    assert from_sysfs(tmp_path) == {"l1d": 48 * 2**10, "l2": 2 * 2**20, "l3": 96 * 2**20}


def test_lscpu_totals_divided_by_instances():
    text = "L1d cache: 64 KiB (2 instances)\nL1i cache: 64 KiB (2 instances)\n"
    text += "L2 cache: 2 MiB (2 instances)\nL3 cache: 32 MiB (1 instance)\n"
    assert from_lscpu(text) == {"l1d": 32 * 2**10, "l2": 2**20, "l3": 32 * 2**20}


# ---------------------------------------------------------------- GC churn


def test_tape_leaves_cyclic_garbage_and_numpy_temporaries_do_not(cell):
    params, x, grad_y = small_problem(cell)
    counts = {}
    for kind in ("tape", "naive"):
        runner = rnnopt.get_variant(f"numpy-{cell}-{kind}", dtype="float64").runner(
            params, x, grad_y
        )
        counts[kind] = object_counts(runner, "step", seq_len=x.shape[1])
    assert counts["tape"]["cyclic_garbage_per_call"] > 10 * x.shape[1]
    assert counts["naive"]["cyclic_garbage_per_call"] == 0
    assert gc.isenabled()


@pytest.mark.parametrize("mode", ["on", "off"])
def test_churn_record(tmp_path, mode):
    out = tmp_path / "churn.json"
    args = ["churn", "--variant", "numpy-lstm-tape", "--dtype", "float64", *TINY, *FAST]
    assert main([*args, "--phase", "step", "--threads", "1", "--gc", mode, "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    metrics = record["metrics"]
    assert record["kind"] == "churn" and record["status"] == "ok"
    assert metrics["gc_enabled"] is (mode == "on") and record["config"]["gc"] == mode
    assert metrics["objects"]["cyclic_garbage_per_call"] > 0
    if mode == "off":  # the collector never runs inside a timed call
        assert metrics["gc"]["gen0"] == metrics["gc"]["gen2"] == 0 and metrics["gc"]["share"] == 0
    assert gc.isenabled()


# ---------------------------------------------------------------- precision


def test_long_sequence_errors_per_dtype():
    shape = {"batch": 2, "seq_len": 200, "input_size": 3, "hidden_size": 4}
    exact, series = long_sequence_errors(rnnopt.get_variant("numpy-lstm-fused", "float64"), shape)
    single, _ = long_sequence_errors(rnnopt.get_variant("numpy-lstm-fused", "float32"), shape)
    assert len(series["error_per_step"]) == 200
    assert exact["output"]["max_abs_error"] < 1e-12 and exact["gradients"]["worst"] < 1e-10
    assert 1e-9 < single["output"]["max_abs_error"] < 1e-5
    assert single["gradients"]["worst"] < 1e-4


def test_growth_compares_the_last_tenth_with_the_first():
    assert growth(np.array([1.0] * 10 + [3.0] * 10)) == pytest.approx(3.0)
    assert growth(np.zeros(20)) is None


def test_precision_command_records_ok_and_skipped(tmp_path):
    flags = ["--batch", "2", "--seq-len", "50", "--input-size", "3", "--hidden-size", "4"]
    ok, skipped = tmp_path / "ok.json", tmp_path / "skipped.json"
    assert main(["precision", "--variant", "numpy-lstm-fused", *flags, "--out", str(ok)]) == 0
    args = ["precision", "--variant", "numpy-lstm-fused", "--dtype", "bfloat16", *flags]
    assert main([*args, "--out", str(skipped)]) == 0
    record = json.loads(ok.read_text())
    assert record["kind"] == "precision" and len(record["series"]["error_per_step"]) == 50
    assert record["shape"]["seq_len"] == 50
    bad = json.loads(skipped.read_text())
    assert bad["status"] == "skipped" and "bfloat16" in bad["reason"]


def test_precision_jobs_leave_out_unsupported_dtypes():
    jobs = config_check.precision_jobs(
        {"variants": ["numpy-lstm-fused"], "dtypes": ["float32", "bfloat16"], "devices": ["cpu"]}
    )
    assert jobs == [{"variant": "numpy-lstm-fused", "dtype": "float32", "device": "cpu"}]


# ---------------------------------------------------------------- verdict rules


def sweep(gflops: list[float], hidden=(128, 512, 2048), l3=32 * 2**20) -> pd.DataFrame:
    """A float32 hidden-size sweep; W_hh of H=2048 is 64 MiB, beyond a 32 MiB L3."""
    frame = pd.DataFrame({"hidden_size": list(hidden), "gflops": gflops})
    frame["w_hh_bytes"] = 16.0 * frame["hidden_size"] ** 2
    sizes = {"l1d_bytes": 32 * 2**10, "l2_bytes": 2**20, "l3_bytes": l3}
    frame["level"] = [cache._level(row | sizes) for row in frame.to_dict("records")]
    return frame


def test_cache_verdict_rules():
    assert sweep([20, 20, 10])["level"].tolist() == ["L2", "L3", "beyond L3"]
    assert cache.cache_verdict(sweep([20, 20, 10]))[1].startswith("supported")
    assert cache.cache_verdict(sweep([20, 20, 15]))[1].startswith("not supported")
    none_beyond = cache.cache_verdict(sweep([20, 20, 10], l3=2**30))[1]
    assert none_beyond == "not measured here: no hidden size with W_hh beyond L3"
    unknown = sweep([20, 20, 10]).assign(level=None)
    assert "cache sizes are unknown" in cache.cache_verdict(unknown)[1]


def test_the_persistent_rungs_slice_of_w_hh_is_what_meets_the_private_caches(tmp_path):
    # H=512: W_hh 4 MiB. Split over 4 threads, each core's 1 MiB slice fits its L2; the
    # fused rung's threads all read the whole of it, which only L3 holds
    from rnnopt.report.aggregate import collect
    from rnnopt.report.experiments.memory import point_tables
    from tests.test_aggregate import CPU_RUN, ENV, Results

    caches = {"l1d": 32 * 2**10, "l2": 2**20 + 1, "l3": 32 * 2**20}
    results = Results(tmp_path / "results")
    for variant in ("numpy-lstm-persistent", "numpy-lstm-fused"):
        for hidden in (128, 512, 2048):
            results.profile(
                CPU_RUN, variant, "float32", 1.0, threads=4, env=ENV | {"cpu_caches": caches},
                batch=8, seq_len=2, input_size=32, hidden_size=hidden,
            )  # fmt: skip
    metrics, _ = collect(tmp_path / "results")
    points = cache.cache_points(metrics).set_index(["variant", "hidden_size"])
    assert points.loc[("numpy-lstm-persistent", 512), "w_hh_bytes_per_thread"] == 2**20
    assert points.loc[("numpy-lstm-persistent", 512), "level"] == "L2"
    assert points.loc[("numpy-lstm-fused", 512), "level"] == "L3"
    assert points.loc[("numpy-lstm-persistent", 2048), "level"] == "beyond L3"  # 64 MiB
    assert "w_hh_bytes_per_thread" in point_tables(metrics)["weights_vs_cache"]
    rows = {row["experiment"].split()[3]: row for row in cache.cache_rows(metrics, CPU_RUN)}
    assert "H=512 (4 MiB, 1 MiB a thread, L2)" in rows["numpy-lstm-persistent"]["result"]
    assert "H=512 (4 MiB, L3)" in rows["numpy-lstm-fused"]["result"]


def test_cache_verdict_rests_on_the_interval_over_processes():
    """With each point's processes, the ratio of the best points gets an interval, and a ratio
    whose interval crosses the 0.70 drop is inconclusive, not a verdict that the next run may
    flip (0.72x in one fresh run, 0.70x in the next, on one host)."""

    def with_processes(beyond_times):
        frame = sweep([20, 21, 13.6])  # the best inside: H=512, whose processes spread
        frame["flops"] = [2e7, 2e7, 2e7]
        frame["process_times"] = [(1.0, 1.0, 1.0), (1.0, 1.02, 0.98), beyond_times]
        return frame

    tight = cache.cache_verdict(with_processes((1.47, 1.47, 1.47)))
    assert tight[0].endswith("best inside 0.68x (0.65-0.71)")
    assert tight[1].startswith("inconclusive")  # 0.71 > 0.70: the interval crosses
    tighter = cache.cache_verdict(with_processes((1.6, 1.6, 1.6)))
    assert tighter[0].endswith("(0.59-0.66)") and tighter[1].startswith("supported")
    wide_spread = cache.cache_verdict(with_processes((1.25, 1.47, 1.7)))
    assert wide_spread[1].startswith("inconclusive: ") and "crosses the 0.7" in wide_spread[1]


def test_cache_verdict_beside_what_the_bandwidth_roofs_predict():
    agreeing = sweep([20, 20, 10]).assign(attainable_gflops=[100.0, 100.0, 40.0])
    result, verdict = cache.cache_verdict(agreeing)
    assert result.endswith("the roofline predicts 0.40x")
    assert verdict.startswith("supported") and verdict.endswith("the bandwidth roofs agree")
    compute_bound = sweep([20, 20, 10]).assign(attainable_gflops=[100.0, 100.0, 100.0])
    verdict = cache.cache_verdict(compute_bound)[1]
    assert verdict.endswith("predict none: what limits these points is not DRAM bandwidth alone")
    unmeasured = sweep([20, 20, 10]).assign(attainable_gflops=None)
    assert "roofline" not in "".join(cache.cache_verdict(unmeasured))


def test_gc_rule_is_the_collectors_share_of_the_timed_time():
    assert churn.gc_holds({"gc.share_on": 0.30})
    assert not churn.gc_holds({"gc.share_on": 0.005})
    assert not churn.gc_holds({"gc.share_on": 0.0})


def test_precision_verdict_rules():
    row = {"dtype": "bfloat16", "output.max_abs_error": 3e-3, "heldout": 1.02}
    row |= {"heldout_float64": 1.0, "heldout_float32": 1.1}
    assert precision.precision_verdict(row).startswith("no loss that matters")
    assert "h off by" in precision.precision_verdict(row | {"output.max_abs_error": 0.05})
    worse = precision.precision_verdict(row | {"heldout": 1.2})
    assert worse == "precision lost: held-out loss +20.0% vs float64"
    no_f64 = precision.precision_verdict(row | {"heldout_float64": None, "heldout": 1.32})
    assert no_f64 == "precision lost: held-out loss +20.0% vs float32"
    better = precision.precision_verdict(row | {"heldout": 0.7})
    assert better.startswith("result differs, not worse") and "-30.0% vs float64" in better
    single = row | {"dtype": "float32", "heldout_float64": None}
    assert "no more precise training run" in precision.precision_verdict(single)
    assert precision.precision_verdict(row | {"dtype": "float64"}) == "reference dtype"


# ---------------------------------------------------------------- the report


def test_report_with_and_without_these_records(tmp_path):
    run = tmp_path / "results" / "cpu-test"
    for mode in ("on", "off"):
        out = run / "churn" / f"gc-{mode}.json"
        args = ["churn", "--variant", "numpy-lstm-naive", "--dtype", "float64", *TINY, *FAST]
        main([*args, "--phase", "step", "--threads", "1", "--gc", mode, "--out", str(out)])
    flags = ["--batch", "2", "--seq-len", "30", "--input-size", "3", "--hidden-size", "4"]
    for dtype in ("float64", "float32"):
        out = run / "precision" / f"{dtype}.json"
        main(
            [
                "precision",
                "--variant",
                "numpy-lstm-fused",
                "--dtype",
                dtype,
                *flags,
                "--out",
                str(out),
            ]
        )
    data = tmp_path / "adding.npz"
    main(
        [
            "data",
            "make",
            "--task",
            "adding",
            "--n-sequences",
            "20",
            "--seq-len",
            "6",
            "--out",
            str(data),
        ]
    )
    for dtype in ("float64", "float32"):
        out = run / "train" / "adding" / "base" / "numpy-lstm-fused" / f"cpu-{dtype}.json"
        args = ["train", "--variant", "numpy-lstm-fused", "--dtype", dtype, "--data", str(data)]
        args += ["--steps", "3", "--batch", "4", "--hidden-size", "4", "--lr", "0.01"]
        assert main([*args, "--out", str(out)]) == 0
    metrics, series = collect(tmp_path / "results")
    rows = build(metrics, series, tmp_path / "report")
    table = pd.read_csv(rows["cache_gc_precision"])
    verdicts = dict(zip(table["experiment"], table["verdict"], strict=True))
    assert verdicts["weights vs cache (hidden-size sweep)"].startswith("not measured here")
    assert verdicts["GC: when C12 holds"] == "not supported for any variant measured"
    assert verdicts["precision: numpy-lstm-fused f64"] == "reference dtype"
    # float32 and float64 train the same steps from the same weights: the same held-out loss
    assert verdicts["precision: numpy-lstm-fused f32"].startswith("no loss that matters")
    assert re.search(
        r"held-out loss [+-]0\.0% vs float64$", verdicts["precision: numpy-lstm-fused f32"]
    )
    result = table.set_index("experiment").loc["precision: numpy-lstm-fused f32", "result"]
    assert "held-out loss" in result and "after training (adding)" in result
    for name in FIGURES:
        assert (tmp_path / "report" / "figures" / f"{name}.png").stat().st_size > 0
    empty = build(metrics.iloc[0:0], series.iloc[0:0], tmp_path / "empty")
    table = pd.read_csv(empty["cache_gc_precision"])
    assert table["verdict"].str.startswith("not measured here").all() and len(table) == 3


def test_a_sweep_timed_in_one_process_a_point_is_not_judged():
    frame = sweep([20, 21, 10])
    frame["flops"] = [2e7, 2e7, 2e7]
    frame["process_times"] = [(1.0,), (1.0,), (2.1,)]  # 0.48x, but one process a point
    result, verdict = cache.cache_verdict(frame)
    assert "best beyond L3 / best inside 0.48x" in result
    assert verdict == "not judged: one process a point: no interval"
