"""rnnopt.report.aggregate on synthetic records of two runs: a CPU host and a CUDA host."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from rnnopt.cli import main
from rnnopt.errors import UserError
from rnnopt.records import make_record, write_record
from rnnopt.report.aggregate import METRIC_COLUMNS, SERIES_COLUMNS, collect, flatten

CPU_RUN, GPU_RUN = "cpu-test", "cuda-test"
ENV = {
    "git": {"commit": "0123456789abcdef", "dirty": False},
    "python": "3.11.7",
    "numpy": "2.4.6",
    "cpu_model": "Test CPU",
    "cpu_count_logical": 2,
    "hostname": "cpu-host",
    "image": None,
    "gpus": [],
}
GPU_ENV = ENV | {"hostname": "gpu-host", "image": "rnnopt:cuda", "gpus": [{"name": "Test GPU"}]}
TECHNIQUES = {
    "naive": [],
    "inplace": ["preallocation"],
    "batched": ["batching"],
    "fused": ["batching", "preallocation", "hoisted-input-projection"],
    "cell": ["autograd"],
    "nn": ["library-kernels"],
    "jit": ["torchscript"],
    "compile": ["torch-compile"],
    "seq": ["hoisted-input-projection"],
    "scan": ["hoisted-input-projection", "parallel-scan"],
    "persistent": ["batching", "hoisted-input-projection", "persistent-weights"],
}
ANCHOR = {"batch": 16, "seq_len": 20, "input_size": 32, "hidden_size": 64}


# Each profile job is timed in three processes, their medians this far apart (geometric mean
# within 0.01% of the job's median).
PROCESS_SPREAD = (0.99, 1.0, 1.01)


def _probes(probe_ms) -> tuple[float, float]:
    """The probes before and after a timing loop: one value for both, or a pair."""
    return tuple(probe_ms) if isinstance(probe_ms, tuple) else (probe_ms, probe_ms)


class FakeVariant:
    """What make_record reads from a Variant: describe()."""

    def __init__(self, name: str, dtype: str, device: str = "cpu"):
        self.name, self.dtype, self.device = name, dtype, device

    def describe(self) -> dict:
        framework, cell, kind = self.name.split("-")
        return {
            "variant": self.name,
            "framework": framework,
            "cell": cell,
            "techniques": TECHNIQUES[kind],
            "dtype": self.dtype,
            "device": self.device,
        }


class Results:
    """Writes records under results/<run>/<stage>/... as the workflow lays them out."""

    def __init__(self, root):
        self.root = root

    def write(
        self,
        run,
        relative,
        kind,
        *,
        env=ENV,
        variant=None,
        dtype="float32",
        device="cpu",
        status="ok",
        reason=None,
        metrics=None,
        **fields,
    ):
        record = make_record(
            kind,
            seed=0,
            config={},
            metrics=metrics,
            status=status,
            reason=reason,
            variant=FakeVariant(variant, dtype, device) if variant else None,
            env=env,
            **fields,
        )
        write_record(self.root / run / relative, record)

    def profile(
        self,
        run,
        variant,
        dtype,
        median_ms,
        *,
        device="cpu",
        phase="step",
        threads=1,
        status="ok",
        reason=None,
        env=ENV,
        compile_s=None,
        gc_pause_ms=0.0,
        processes=PROCESS_SPREAD,
        probes=None,
        **shape,
    ):
        """One record per process, process p's median `median_ms` x processes[p], its speed
        probes probes[p] ms (1.0 by default; a pair: before and after its timing loop)."""
        probes = probes or [1.0] * len(processes)
        for process, (factor, probe) in enumerate(zip(processes, probes, strict=True)):
            self._profile_process(
                run,
                variant,
                dtype,
                median_ms * factor,
                process,
                device=device,
                phase=phase,
                threads=threads,
                status=status,
                reason=reason,
                env=env,
                compile_s=compile_s,
                gc_pause_ms=gc_pause_ms,
                probe_ms=probe,
                **shape,
            )

    def _profile_process(
        self,
        run,
        variant,
        dtype,
        median_ms,
        process,
        *,
        device,
        phase,
        threads,
        status,
        reason,
        env,
        compile_s,
        gc_pause_ms,
        probe_ms=1.0,
        **shape,
    ):
        shape = ANCHOR | shape
        tokens = shape["batch"] * shape["seq_len"]
        metrics = None
        if status == "ok":
            metrics = {
                "time_ms": {
                    "median": median_ms,
                    "iqr": 0.04 * median_ms,
                    "min": 0.97 * median_ms,
                    "mean": median_ms,
                    "n": 50,
                },
                "noisy": False,
                "tokens_per_s": tokens / (median_ms / 1e3),
                "flops": 1e6 * shape["hidden_size"] * tokens / 100,
                "gflops": 1e6 * shape["hidden_size"] * tokens / 100 / (median_ms / 1e3) / 1e9,
                "peak_fraction": 0.1,
                "compile_s": compile_s,
                "gc": {"gen0": 3, "gen1": 0, "gen2": 0, "pause_ms": gc_pause_ms},
                "contention": dict(
                    zip(("probe_before_ms", "probe_after_ms"), _probes(probe_ms), strict=True)
                ),
            }
        where = "b{batch}-t{seq_len}-i{input_size}-h{hidden_size}".format(**shape)
        self.write(
            run,
            f"profile/{variant}/{device}-{dtype}/{where}/{phase}-threads{threads}-p{process}.json",
            "profile",
            env=env,
            variant=variant,
            dtype=dtype,
            device=device,
            status=status,
            reason=reason,
            metrics=metrics,
            phase=phase,
            shape=shape,
            threads=threads,
            process=process,
        )

    def memory(self, run, variant, dtype, peak_mib, *, device="cpu", env=ENV, blocks=0.0, **shape):
        shape = ANCHOR | shape
        times = [0.01 * i for i in range(40)]
        rss = [300 + peak_mib * min(i, 20) / 20 for i in range(40)]
        metrics = {
            "peak_mib": peak_mib,
            "tracemalloc": {"numpy_blocks_per_step": blocks},
            "rss": {"baseline_mib": 300.0, "peak_mib": 300 + peak_mib},
        }
        where = "b{batch}-t{seq_len}-i{input_size}-h{hidden_size}".format(**shape)
        self.write(
            run,
            f"memory/{variant}/{device}-{dtype}/{where}/step-threads1.json",
            "memory",
            env=env,
            variant=variant,
            dtype=dtype,
            device=device,
            metrics=metrics,
            phase="step",
            shape=shape,
            threads=1,
            series={"rss_t_s": times, "rss_mib": rss, "call_end_t_s": [0.1, 0.2]},
        )

    def train(
        self,
        run,
        setting,
        variant,
        final_loss,
        *,
        status="ok",
        reason=None,
        batch=32,
        time_ms=10.0,
        clip_fraction=0.0,
        env=ENV,
        task="adding",
        steps=20,
        fast_ms=None,
        process=None,
    ):
        metrics = {
            "final_loss": final_loss,
            "baseline_loss": 0.17,
            "time_per_step_ms": time_ms,
            **({"time_per_step_q10_ms": fast_ms} if fast_ms is not None else {}),
            "tokens_per_s": batch * 30 / (time_ms / 1e3),
            "clip_fraction": clip_fraction,
            "steps_completed": steps,
        }
        losses = [1.0 / (1 + i) + final_loss for i in range(20)]
        series = {"loss": losses, "grad_norm": [1.0] * 20}
        if status == "ok":  # held-out loss = final loss, 0.17 for predicting the mean
            metrics |= {"heldout_loss": final_loss, "heldout_baseline_loss": 0.17}
            metrics["heldout_loss_ratio"] = final_loss / 0.17
            series |= {"eval_step": [0, 10, 20], "heldout_loss": [1.0, 0.5, final_loss]}
        name = "cpu-float32" if process is None else f"cpu-float32-p{process}"
        self.write(
            run,
            f"train/{task}/{setting}/{variant}/{name}.json",
            "train",
            env=env,
            variant=variant,
            status=status,
            reason=reason,
            metrics=metrics,
            task=task,
            shape={"batch": batch, "seq_len": 30, "input_size": 2, "hidden_size": 32},
            threads=1,
            series=series,
            **({"process": process} if process is not None else {}),
        )

    def verify(
        self, run, variant, dtype, *, device="cpu", passed=True, status="ok", reason=None, env=ENV
    ):
        metrics = None
        if status == "ok":
            error = 1e-7 if passed else 3e-2
            metrics = {
                "max_rel_error": {"output": error, "weight_hh": error / 2},
                "tolerance": 1e-5,
                "passed": passed,
            }
        self.write(
            run,
            f"verify/{variant}/{device}-{dtype}.json",
            "verify",
            env=env,
            variant=variant,
            dtype=dtype,
            device=device,
            status=status,
            reason=reason,
            metrics=metrics,
        )


NO_CUDA = "torch-lstm-nn on cuda: no CUDA device on this host; available: cpu"
CPU_TIMES = [  # variant, dtype, median ms at the anchor
    ("numpy-lstm-naive", "float64", 100.0),
    ("numpy-lstm-inplace", "float64", 80.0),
    ("numpy-lstm-batched", "float64", 10.0),
    ("numpy-lstm-fused", "float64", 6.0),
    ("numpy-lstm-fused", "float32", 3.0),
    ("torch-lstm-cell", "float32", 4.0),
    ("torch-lstm-nn", "float32", 1.0),
    ("torch-lstm-jit", "float32", 3.5),
    ("torch-lstm-compile", "float32", 2.0),
    ("torch-lstm-nn", "bfloat16", 0.8),
]


def write_results(root) -> Results:
    """Two runs: a CPU host with the whole ladder, a CUDA host with torch on both devices."""
    results = Results(root)
    for variant, dtype, median in CPU_TIMES:
        compile_s = 30.0 if "compile" in variant else None
        pause = 2.0 if "naive" in variant else 0.0
        results.profile(CPU_RUN, variant, dtype, median, compile_s=compile_s, gc_pause_ms=pause)
        passed = variant != "torch-lstm-jit"
        results.verify(CPU_RUN, variant, dtype, passed=passed)
    for dtype in ("float32", "float16"):
        results.profile(
            CPU_RUN, "torch-lstm-nn", dtype, 0, device="cuda", status="skipped", reason=NO_CUDA
        )
        results.verify(
            CPU_RUN, "torch-lstm-nn", dtype, device="cuda", status="skipped", reason=NO_CUDA
        )
    for batch, median in ((4, 0.5), (64, 2.0)):
        results.profile(CPU_RUN, "torch-lstm-nn", "float32", median, batch=batch)
    for seq_len, median in ((5, 0.8), (80, 12.0)):
        results.profile(CPU_RUN, "numpy-lstm-fused", "float32", median, seq_len=seq_len)
    for variant, dtype, peak, blocks in (
        ("numpy-lstm-naive", "float64", 4.0, 12.0),
        ("numpy-lstm-inplace", "float64", 2.0, 0.0),
        ("numpy-lstm-batched", "float64", 3.0, 6.0),
        ("numpy-lstm-fused", "float64", 2.0, 1.0),
        ("numpy-lstm-fused", "float32", 1.0, 1.0),
        ("torch-lstm-cell", "float32", 3.0, 0.0),
        ("torch-lstm-nn", "float32", 2.0, 0.0),
        ("torch-lstm-nn", "bfloat16", 1.5, 0.0),
    ):
        results.memory(CPU_RUN, variant, dtype, peak, blocks=blocks)
    results.memory(CPU_RUN, "torch-lstm-nn", "float32", 8.0, batch=64)
    for variant, loss in (
        ("numpy-lstm-naive", 0.05),
        ("numpy-lstm-fused", 0.0501),
        ("torch-lstm-cell", 0.05),
        ("torch-lstm-nn", 0.0502),
    ):
        results.train(CPU_RUN, "base", variant, loss)
    results.train(
        CPU_RUN,
        "clip-off",
        "torch-lstm-nn",
        math.nan,
        status="diverged",
        reason="loss became nan at step 7",
        steps=7,
    )
    results.train(CPU_RUN, "clip-on", "torch-lstm-nn", 0.04, clip_fraction=0.6)
    results.train(CPU_RUN, "accum-1x64", "torch-lstm-nn", 0.03, batch=64, time_ms=12.0)
    results.train(CPU_RUN, "accum-4x16", "torch-lstm-nn", 0.0301, batch=16, time_ms=20.0)
    for batch, time_ms in ((8, 5.0), (32, 6.0), (128, 10.0)):
        results.train(
            CPU_RUN, f"batch-{batch}", "torch-lstm-nn", 0.04, batch=batch, time_ms=time_ms
        )
    results.write(
        CPU_RUN,
        "peak/threads1.json",
        "peak",
        threads=1,
        metrics={
            "gemm_gflops": {"numpy": {"float64": 45.0, "float32": 90.0}, "torch": {"float32": 70.0}}
        },
    )
    results.write(
        CPU_RUN,
        "timer-check/threads1.json",
        "timer-check",
        threads=1,
        variant="torch-lstm-nn",
        metrics={"ratio": 1.02, "agrees": True},
    )
    # a dataset manifest: JSON beside the records that is not a record
    (root / CPU_RUN / "datasets").mkdir(parents=True)
    (root / CPU_RUN / "datasets" / "adding.json").write_text(json.dumps({"task": "adding"}))

    for device, dtype, median, peak in (
        ("cpu", "float32", 1.2, 2.0),
        ("cuda", "float32", 0.1, 1.0),
        ("cuda", "float16", 0.05, 0.5),
    ):
        results.profile(GPU_RUN, "torch-lstm-nn", dtype, median, device=device, env=GPU_ENV)
        results.memory(GPU_RUN, "torch-lstm-nn", dtype, peak, device=device, env=GPU_ENV)
        results.verify(GPU_RUN, "torch-lstm-nn", dtype, device=device, env=GPU_ENV)
    return results


@pytest.fixture
def results_dir(tmp_path):
    write_results(tmp_path / "results")
    return tmp_path / "results"


def test_flatten_nests_with_dots_and_keeps_numbers_only():
    flat = flatten({"time_ms": {"median": 2, "n": 5}, "noisy": True, "note": "x", "lost": None})
    assert flat["time_ms.median"] == 2.0 and flat["time_ms.n"] == 5.0
    assert flat["noisy"] == 1.0
    assert "note" not in flat and math.isnan(flat["lost"])


def test_collect_is_tidy_with_run_from_path(results_dir):
    metrics, series = collect(results_dir)
    assert list(metrics.columns) == list(METRIC_COLUMNS)
    assert list(series.columns) == list(SERIES_COLUMNS)
    assert set(metrics["run"]) == {CPU_RUN, GPU_RUN}
    assert not metrics.duplicated(["source", "metric"]).any()
    naive = metrics[(metrics["variant"] == "numpy-lstm-naive") & (metrics["kind"] == "profile")]
    medians = naive[naive["metric"] == "time_ms.median"].sort_values("process")
    assert medians["value"].tolist() == [99.0, 100.0, 101.0]  # one record per process
    assert medians["process"].tolist() == [0, 1, 2]
    row = naive.iloc[0]
    assert (row["batch"], row["seq_len"], row["threads"], row["phase"]) == (16, 20, 1, "step")
    assert row["cpu_model"] == "Test CPU" and row["git_commit"] == "0123456789abcdef"
    assert row["source"].startswith(f"{CPU_RUN}/profile/numpy-lstm-naive/")
    gpu = metrics[metrics["run"] == GPU_RUN]
    assert set(gpu["gpu"]) == {"Test GPU"} and set(gpu["device"]) == {"cpu", "cuda"}


def test_skipped_records_keep_status_and_reason(results_dir):
    metrics, _ = collect(results_dir)
    skipped = metrics[metrics["status"] == "skipped"]
    # verify, float32 and float16 on cuda, and profile in each of three processes
    assert len(skipped) == 2 + 2 * len(PROCESS_SPREAD)
    assert skipped["metric"].isna().all()
    assert set(skipped["reason"]) == {NO_CUDA}
    diverged = metrics[metrics["status"] == "diverged"]
    assert set(diverged["setting"]) == {"clip-off"}
    assert math.isnan(diverged.set_index("metric").loc["final_loss", "value"])


def test_nested_and_boolean_metrics_flatten(results_dir):
    metrics, _ = collect(results_dir)
    verify = metrics[(metrics["kind"] == "verify") & (metrics["variant"] == "torch-lstm-jit")]
    values = verify.set_index("metric")["value"]
    assert values["passed"] == 0.0 and values["max_rel_error.output"] == pytest.approx(3e-2)
    peak = metrics[metrics["kind"] == "peak"].set_index("metric")["value"]
    assert peak["gemm_gflops.numpy.float32"] == 90.0


def test_series_are_long_with_steps(results_dir):
    _, series = collect(results_dir)
    loss = series[(series["series"] == "loss") & (series["setting"] == "base")]
    assert loss.groupby("source")["step"].max().eq(19).all()
    assert set(series["series"]) >= {"loss", "grad_norm", "rss_t_s", "rss_mib"}


def test_invalid_record_is_one_line_naming_the_file(results_dir):
    bad = results_dir / CPU_RUN / "profile" / "bad.json"
    bad.write_text(json.dumps({"schema": "rnnopt.record/1", "kind": "profile"}))
    with pytest.raises(UserError, match="bad.json"):
        collect(results_dir)


def test_cli_writes_parquet_and_csv(results_dir, capsys):
    out = results_dir
    assert main(["aggregate", "--results", str(results_dir)]) == 0
    assert "runs" in capsys.readouterr().out
    metrics = pd.read_parquet(out / "metrics.parquet")
    assert len(metrics) == len(pd.read_csv(out / "metrics.csv"))
    assert len(pd.read_parquet(out / "series.parquet")) > 0
    assert metrics["batch"].dtype == "Int64"


def test_a_gz_csv_is_gzip_with_the_same_bytes_every_time(results_dir, tmp_path):
    """The committed reference keeps its tidy CSV gzipped: readable by pandas, and equal bytes
    from equal records (no gzip timestamp), so regenerating it changes nothing in git."""
    written = []
    for name in ("first", "second"):
        csv = tmp_path / name / "metrics.csv.gz"
        args = ["aggregate", "--results", str(results_dir), "--csv", str(csv)]
        assert main([*args, "--metrics", str(tmp_path / name / "m.parquet")]) == 0
        header = csv.read_bytes()[:8]
        assert header[:2] == b"\x1f\x8b"  # the gzip magic number
        assert header[4:8] == bytes(4)  # MTIME: no timestamp, whenever it was written
        written.append(csv.read_bytes())
    assert written[0] == written[1]
    plain = pd.read_parquet(tmp_path / "first" / "m.parquet")
    assert len(pd.read_csv(tmp_path / "first" / "metrics.csv.gz")) == len(plain)


@pytest.mark.parametrize("schema", [None, "rnnopt.record/2"])
def test_a_json_under_a_stage_that_is_no_record_is_an_error_naming_it(results_dir, schema):
    """It was silently left out ('0 records from 0 runs', exit 0): issue 23, item 5."""
    stray = results_dir / CPU_RUN / "profile" / "stray.json"
    stray.write_text(json.dumps({"kind": "profile"} | ({"schema": schema} if schema else {})))
    with pytest.raises(UserError, match=rf"{stray}: not an rnnopt record \(schema"):
        collect(results_dir)
