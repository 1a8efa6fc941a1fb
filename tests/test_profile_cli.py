"""`rnnopt profile` / `peak` / `timer-check` end to end on tiny shapes, and every status path.

No timing assertions: only that records are written, valid, and say what happened.
"""

import re
import subprocess
import sys

import numpy as np
import pytest

import rnnopt.cli.peak
import rnnopt.cli.profile
import rnnopt.measure.harness
import rnnopt.measure.peak
import rnnopt.models.variants
from rnnopt.cli import main
from rnnopt.models.flops import PHASES
from rnnopt.models.variants.base import Runner
from rnnopt.records import read_record
from tests.conftest import fresh_python
from tests.measure_helpers import QUICK, TINY, require_variant, run_cli


def profile(tmp_path, variant, *extra):
    out = tmp_path / "record.json"
    argv = ["profile", "--variant", variant, *TINY, "--threads", "1", "--out", str(out)]
    code = run_cli(*argv, *QUICK, *extra)
    return code, read_record(out)


@pytest.mark.parametrize("variant", ["numpy-lstm-fused", "numpy-rnn-naive", "torch-lstm-nn"])
@pytest.mark.parametrize("phase", ["forward", "backward", "step"])
def test_profile_writes_a_valid_record(tmp_path, variant, phase):
    require_variant(variant)
    code, record = profile(tmp_path, variant, "--phase", phase)
    assert code == 0
    assert record["status"] == "ok", record["reason"]
    assert record["kind"] == "profile" and record["variant"] == variant
    assert record["framework"] == variant.split("-")[0] and record["phase"] == phase
    assert record["threads"] == 1 and record["threads_effective"]["torch"] == 1
    metrics = record["metrics"]
    assert metrics["time_ms"]["n"] >= 3
    for key in ("median", "iqr", "min", "mean", "stdev"):
        assert metrics["time_ms"][key] >= 0
    for key in ("tokens_per_s", "gflops", "flops", "warmup_s", "noisy", "per_call", "gc"):
        assert key in metrics


def test_peak_fraction_from_a_peak_record(tmp_path):
    peak = tmp_path / "peak.json"
    argv = ["peak", "--threads", "1", "--out", str(peak), "--size", "32"]
    assert run_cli(*argv, "--min-time-s", "0.01") == 0
    gflops = read_record(peak)["metrics"]["gemm_gflops"]
    assert set(gflops["numpy"]) == {"float64", "float32"}
    assert {"float64", "float32", "bfloat16"} <= set(gflops["torch"])
    code, record = profile(tmp_path, "torch-lstm-nn", "--phase", "forward", "--peak", str(peak))
    assert code == 0
    metrics = record["metrics"]
    # the host's ceiling: the best library of the dtype, not torch's own
    assert metrics["peak_gflops"] == max(gflops["torch"]["float32"], gflops["numpy"]["float32"])
    assert any(note.startswith("ceiling: ") for note in record["notes"])
    assert metrics["peak_fraction"] == pytest.approx(metrics["gflops"] / metrics["peak_gflops"])


def test_peak_measures_only_the_dtypes_asked_for(tmp_path):
    peak = tmp_path / "peak.json"
    argv = ["peak", "--threads", "1", "--out", str(peak), "--size", "32", "--dtypes", "float32"]
    assert run_cli(*argv, "--min-time-s", "0.01") == 0
    metrics = read_record(peak)["metrics"]
    gflops = metrics["gemm_gflops"]
    assert set(gflops["numpy"]) == {"float32"} and set(gflops["torch"]) == {"float32"}
    assert {library: set(layouts) for library, layouts in metrics["gemm_layout"].items()} == {
        "numpy": {"float32"},
        "torch": {"float32"},
    }


@pytest.mark.parametrize("library", ["numpy", "torch"])
@pytest.mark.parametrize("layout", rnnopt.measure.peak.LAYOUTS)
def test_gemm_computes_the_product_in_every_layout(library, layout):
    call, _ = rnnopt.measure.peak.gemm_call(library, "float64", 8, layout, seed=3)
    a, b = np.random.default_rng(3).standard_normal((2, 8, 8))
    a, b = (a.T if layout[0] == "t" else a), (b.T if layout[1] == "t" else b)
    np.testing.assert_allclose(np.asarray(call()), a @ b, rtol=1e-12)


def test_peak_tries_every_layout_at_the_first_size_and_keeps_the_best(tmp_path, monkeypatch):
    """Fake GEMM rates, "tn" fastest: larger sizes run in "tn" only, and the record keeps it."""
    calls = []

    def fake_gemm(library, dtype, size, min_time_s, layout):
        calls.append((library, size, layout))
        rate = {"nn": 1.0, "nt": 2.0, "tn": 3.0}[layout] * size
        return {"gflops": rate, "time_ms": 1.0, "calls": 5}

    monkeypatch.setattr(rnnopt.cli.peak, "measure_gemm", fake_gemm)
    peak = tmp_path / "peak.json"
    argv = ["peak", "--threads", "1", "--out", str(peak), "--dtypes", "float32"]
    assert run_cli(*argv, "--size", "16", "32") == 0
    for library in ("numpy", "torch"):
        tried = [(size, layout) for name, size, layout in calls if name == library]
        assert tried == [(16, "nn"), (16, "nt"), (16, "tn"), (32, "tn")]
    metrics = read_record(peak)["metrics"]
    assert metrics["gemm_layout"]["torch"]["float32"] == "tn"
    assert metrics["gemm_size"]["torch"]["float32"] == 32
    assert metrics["gemm_gflops"]["torch"]["float32"] == 96.0


def test_timer_check_record(tmp_path):
    out = tmp_path / "check.json"
    argv = ["timer-check", "--variant", "torch-lstm-nn", *TINY, "--threads", "1"]
    assert run_cli(*argv, "--phase", "forward", "--out", str(out), *QUICK) == 0
    metrics = read_record(out)["metrics"]
    timer = metrics["torch_timer"]["blocked"]
    # like with like: our samples in blocks of Timer's size against Timer's blocked median
    assert metrics["ratio"] == pytest.approx(metrics["blocked_median_ms"] / timer["median_ms"])
    assert metrics["ratio_per_call"] == pytest.approx(
        metrics["time_ms"]["median"] / timer["median_ms"]
    )
    assert metrics["tail"] == pytest.approx(
        metrics["time_ms"]["mean"] / metrics["time_ms"]["median"]
    )
    assert isinstance(metrics["agrees"], bool)
    assert metrics["agrees"] == (abs(metrics["ratio"] - 1) <= 0.10)


def test_profile_times_several_phases_in_one_process(tmp_path):
    template = str(tmp_path / "{phase}.json")
    argv = ["profile", "--variant", "numpy-lstm-fused", *TINY, "--threads", "1", *QUICK]
    assert run_cli(*argv, "--phase", "forward", "backward", "step", "--out", template) == 0
    records = {phase: read_record(tmp_path / f"{phase}.json") for phase in PHASES}
    assert {r["phase"] for r in records.values()} == set(PHASES)
    assert all(r["status"] == "ok" for r in records.values())
    # backward FLOPs are twice the forward's GEMMs: the derived figures follow the phase
    assert (
        records["backward"]["metrics"]["gemm_flops"]
        == 2 * records["forward"]["metrics"]["gemm_flops"]
    )


@pytest.mark.parametrize("phases", [["forward"], ["forward", "backward", "step"]])
def test_records_keep_their_process_samples_and_contention(tmp_path, phases):
    """Every timed call of a process is in its record, in order, and time_ms summarises
    exactly those; the record says which process it is and how much the machine was shared."""
    template = str(tmp_path / "{phase}.json")
    argv = ["profile", "--variant", "numpy-lstm-fused", *TINY, "--threads", "1", *QUICK]
    assert run_cli(*argv, "--phase", *phases, "--process", "2", "--out", template) == 0
    for phase in phases:
        record = read_record(tmp_path / f"{phase}.json")
        assert record["process"] == 2
        metrics = record["metrics"]
        samples = metrics["samples_ms"]
        assert len(samples) == metrics["time_ms"]["n"]
        assert np.median(samples) == pytest.approx(metrics["time_ms"]["median"])
        assert min(samples) == pytest.approx(metrics["time_ms"]["min"])
        contention = metrics["contention"]
        assert contention["involuntary_ctx_switches"] >= 0 and contention["wall_s"] > 0
        assert contention["wall_s"] >= sum(samples) / 1e3
    if len(phases) == 3:
        step = read_record(tmp_path / "step.json")["metrics"]["samples_ms"]
        parts = [read_record(tmp_path / f"{p}.json")["metrics"]["samples_ms"] for p in phases[:2]]
        assert all(s >= f + b for s, f, b in zip(step, *parts, strict=True))


def test_the_process_defaults_to_0_and_is_never_negative(tmp_path, capsys):
    code, record = profile(tmp_path, "numpy-lstm-fused", "--phase", "forward")
    assert code == 0 and record["process"] == 0
    argv = ["--variant", "numpy-lstm-fused", *TINY, "--threads", "1", "--process", "-1"]
    assert exit_code("profile", *argv, "--out", str(tmp_path / "x.json")) == 2
    assert "--process: expected an integer >= 0, got -1" in capsys.readouterr().err


def test_backward_and_step_come_from_one_loop_of_training_steps(tmp_path, monkeypatch):
    calls = []

    class LoggingVariant(FakeVariant):
        def runner(self, *args):
            runner = Runner()
            for name in ("forward", "backward", "update"):
                setattr(runner, name, lambda name=name: calls.append(name))
            return runner

    monkeypatch.setattr(rnnopt.measure.harness, "get_variant", lambda *a, **k: LoggingVariant(None))
    template = str(tmp_path / "{phase}.json")
    argv = ["profile", "--variant", "numpy-lstm-naive", *TINY, "--threads", "1", *QUICK]
    assert run_cli(*argv, "--phase", *PHASES, "--out", template) == 0
    records = {phase: read_record(tmp_path / f"{phase}.json") for phase in PHASES}
    steps = records["step"]["metrics"]["time_ms"]["n"] + records["step"]["metrics"]["warmup_calls"]
    assert calls == ["forward", "backward", "update"] * steps  # no forward or backward alone
    for record in records.values():
        assert record["status"] == "ok"
        assert record["metrics"]["time_ms"]["n"] == records["step"]["metrics"]["time_ms"]["n"]
        assert rnnopt.cli.profile.TRAINING_STEP_NOTE in record["notes"]
    # a forward asked for alone is timed alone, without the note
    calls.clear()
    assert run_cli(*argv, "--phase", "forward", "--out", str(tmp_path / "alone.json")) == 0
    assert set(calls) == {"forward"}
    alone = read_record(tmp_path / "alone.json")
    assert rnnopt.cli.profile.TRAINING_STEP_NOTE not in alone["notes"]


def test_several_phases_need_a_phase_placeholder(tmp_path, capsys):
    out = tmp_path / "one.json"
    argv = ["profile", "--variant", "numpy-lstm-fused", *TINY, "--threads", "1", *QUICK]
    assert run_cli(*argv, "--phase", "forward", "step", "--out", str(out)) == 2
    assert "{phase}" in capsys.readouterr().err
    assert not out.exists()


def test_float16_on_cpu_is_skipped(tmp_path):
    code, record = profile(tmp_path, "torch-lstm-nn", "--phase", "forward", "--dtype", "float16")
    assert code == 0
    assert record["status"] == "skipped"
    assert "float16" in record["reason"] and "\n" not in record["reason"]


def test_missing_cuda_is_skipped(tmp_path, monkeypatch):
    monkeypatch.setattr(rnnopt.models.variants, "cuda_available", lambda: False)
    code, record = profile(tmp_path, "torch-lstm-nn", "--phase", "step", "--device", "cuda")
    assert code == 0
    assert record["status"] == "skipped" and "CUDA" in record["reason"]
    assert record["device"] == "cuda" and record["framework"] == "torch"


@pytest.mark.parametrize("native", [False, True])
def test_native_only_skips_emulated_bfloat16(tmp_path, monkeypatch, native):
    monkeypatch.setattr(rnnopt.cli.profile, "native_bf16", lambda: native)
    template = str(tmp_path / "{phase}.json")
    argv = ["profile", "--variant", "torch-lstm-nn", *TINY, "--threads", "1", *QUICK]
    argv += ["--dtype", "bfloat16", "--native-only", "--phase", *PHASES, "--out", template]
    assert run_cli(*argv) == 0
    records = [read_record(tmp_path / f"{phase}.json") for phase in PHASES]
    if native:
        assert all(r["status"] == "ok" for r in records)
        return
    for phase, record in zip(PHASES, records, strict=True):
        assert record["status"] == "skipped" and record["phase"] == phase
        assert "no native bfloat16" in record["reason"] and "\n" not in record["reason"]
        assert record["dtype"] == "bfloat16" and record["variant"] == "torch-lstm-nn"
        assert "metrics" not in record or not record["metrics"]


def test_native_only_skip_leaves_torch_unimported(tmp_path):
    """A job that is only skipped as emulated bfloat16 pays no torch import (2-3 s)."""
    template = str(tmp_path / "{phase}.json")
    argv = ["profile", "--variant", "torch-lstm-nn", *TINY, "--threads", "1", *QUICK]
    argv += ["--dtype", "bfloat16", "--native-only", "--phase", *PHASES, "--out", template]
    script = (
        "import sys\n"
        "import rnnopt.cli.profile as profile\n"
        "profile.native_bf16 = lambda: False\n"
        "from rnnopt.cli import main\n"
        f"print(main({argv!r}), 'torch' in sys.modules)\n"
    )
    assert fresh_python(script)[-2:] == ["0", "False"]
    record = read_record(tmp_path / "step.json")
    assert record["status"] == "skipped" and record["threads_effective"]["requested"] == 1


def test_native_only_times_other_dtypes(tmp_path, monkeypatch):
    monkeypatch.setattr(rnnopt.cli.profile, "native_bf16", lambda: False)
    code, record = profile(tmp_path, "torch-lstm-nn", "--phase", "forward", "--native-only")
    assert code == 0 and record["status"] == "ok"


class FakeVariant:
    """Just enough of a Variant for the harness; its runner raises `error` on every call."""

    name, framework, cell, compiles = "numpy-lstm-naive", "numpy", "lstm", False
    dtype, device = "float32", "cpu"

    def __init__(self, error):
        self.error = error

    def describe(self):
        return {
            "variant": self.name,
            "framework": "numpy",
            "cell": "lstm",
            "techniques": [],
            "dtype": self.dtype,
            "device": self.device,
        }

    def runner(self, *args):
        runner = Runner()
        runner.forward = runner.backward = runner.update = runner.step = self.raise_error
        return runner

    def raise_error(self):
        raise self.error


@pytest.mark.parametrize(
    "error, status",
    [
        (MemoryError(), "oom"),
        (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), "oom"),
        (ValueError("shapes (3,4) and (5,) not aligned\nmore detail"), "failed"),
    ],
)
def test_variant_errors_become_records(tmp_path, monkeypatch, error, status):
    monkeypatch.setattr(rnnopt.measure.harness, "get_variant", lambda *a, **k: FakeVariant(error))
    for command in ("profile", "memory"):
        out = tmp_path / f"{command}.json"
        argv = [command, "--variant", "numpy-lstm-naive", *TINY, "--threads", "1"]
        assert run_cli(*argv, "--phase", "step", "--out", str(out)) == 0
        record = read_record(out)
        assert record["status"] == status
        assert record["reason"].startswith(type(error).__name__)
        assert "\n" not in record["reason"]
        assert record["variant"] == "numpy-lstm-naive" and record["techniques"] == []


def exit_code(*argv):
    try:
        return run_cli(*argv)
    except SystemExit as exit:  # argparse rejects a flag value
        return exit.code


@pytest.mark.parametrize(
    "flags",
    [
        ["--variant", "no-such-variant", *TINY],
        ["--variant", "torch-lstm-nn", "--batch", "-1", *TINY[2:]],
        ["--variant", "torch-lstm-nn", *TINY, "--dtype", "int8"],
    ],
)
def test_bad_flags_exit_2(tmp_path, flags, capsys):
    out = tmp_path / "r.json"
    assert (
        exit_code("profile", *flags, "--phase", "forward", "--threads", "1", "--out", str(out)) == 2
    )
    assert not out.exists()
    last_line = capsys.readouterr().err.strip().splitlines()[-1]
    assert last_line.startswith("rnnopt profile: error:")


@pytest.mark.parametrize("text", ["inf", "nan", "-1", "0"])
def test_a_time_budget_is_a_finite_positive_number(text):
    import argparse

    from rnnopt.cli.common import positive_float

    with pytest.raises(argparse.ArgumentTypeError, match="finite positive number"):
        positive_float(text)


def test_an_unwritable_out_is_one_line_before_any_measurement(tmp_path, capsys):
    """It was found after the whole measurement, with a traceback (issue 23, item 9)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = blocker / "profile.json"  # its folder is a file: nothing can be written there
    argv = ["profile", "--variant", "numpy-lstm-naive", *TINY, "--phase", "step", "--threads", "1"]
    argv += ["--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"rnnopt profile: error: --out {out}: cannot write")


def test_braces_in_an_out_path_are_part_of_the_path(tmp_path):
    """`{x}` in a folder name crashed with KeyError (issue 23, item 15): only {phase} is a
    placeholder."""
    folder = tmp_path / "run {x} }{"
    argv = ["profile", "--variant", "numpy-lstm-fused", *TINY, "--threads", "1", *QUICK]
    out = str(folder / "{phase}.json")
    assert run_cli(*argv, "--phase", "forward", "backward", "--out", out) == 0
    assert sorted(p.name for p in folder.iterdir()) == ["backward.json", "forward.json"]


@pytest.mark.parametrize("command", ["train", "verify"])
def test_zero_threads_is_refused_everywhere(tmp_path, command, capsys):
    """`--threads 0` meant "as is" on train and verify, and was refused elsewhere (item 14)."""
    assert exit_code(command, "--threads", "0", "--out", str(tmp_path / "r.json")) == 2
    assert "--threads: expected a positive integer, got 0" in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("command", ["profile", "memory"])
def test_a_shape_beyond_the_hosts_memory_is_skipped_before_allocating(tmp_path, command):
    """hidden_size 10,000,000 allocated 1.28 GB of weights before failing, and a shape the
    kernel's OOM killer ends leaves no record (issue 23, item 7): the analytic model says
    first, and the record says why."""
    out = tmp_path / "r.json"
    shape = ["--batch", "1", "--seq-len", "1", "--input-size", "1", "--hidden-size", "10000000"]
    argv = [command, "--variant", "numpy-lstm-fused", *shape, "--threads", "1", "--phase", "step"]
    assert run_cli(*argv, "--out", str(out), *(QUICK if command == "profile" else ())) == 0
    record = read_record(out)
    assert record["status"] == "skipped"
    assert re.search(
        r"H=10000000 float32 needs at least [\d.e+]+ GiB; .* available", record["reason"]
    )


def test_more_threads_than_cores_is_skipped_not_timed(tmp_path):
    out = tmp_path / "record.json"
    argv = ["profile", "--variant", "numpy-lstm-fused", *TINY, "--threads", "100000", *QUICK]
    argv += ["--phase", "forward", "--out", str(out)]
    done = subprocess.run([sys.executable, "-m", "rnnopt", *argv], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    record = read_record(out)
    assert record["status"] == "skipped" and "metrics" in record and not record["metrics"]
    assert record["reason"].startswith("UnavailableError: --threads 100000: this process may run")
