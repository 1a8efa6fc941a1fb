"""GEMM vs elementwise split: the GEMM-only loops run exactly the phase's GEMMs and nothing
else, the split metrics add up, and profile records carry them for the runners that can."""

import numpy as np
import pytest

import rnnopt
from rnnopt.measure.split import gemm_only_call, split_metrics
from rnnopt.records import read_record
from tests.conftest import small_problem
from tests.measure_helpers import QUICK, TINY, run_cli

SPLIT_KINDS = ("fused", "numba")


class MatmulCounter:
    def __init__(self):
        self.calls = 0
        self._matmul = np.matmul

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self._matmul(*args, **kwargs)


def count_matmuls(monkeypatch, call) -> int:
    counter = MatmulCounter()
    with monkeypatch.context() as patch:
        patch.setattr(np, "matmul", counter)
        call()
    return counter.calls


@pytest.mark.parametrize("kind", SPLIT_KINDS)
@pytest.mark.parametrize("phase", ["forward", "backward", "step"])
def test_gemm_only_runs_the_phase_gemms_and_nothing_else(monkeypatch, kind, phase, cell):
    variant = rnnopt.get_variant(f"numpy-{cell}-{kind}", dtype="float64")
    params, x, grad_y = small_problem(cell, batch=3, seq_len=6)
    runner = variant.runner(params, x, grad_y)
    runner.forward()
    runner.backward()
    gemm_only = gemm_only_call(runner, phase)
    hs_before = np.array(runner._cache.hs)  # the workspaces' hidden states
    weights_before = {name: value.copy() for name, value in runner.p.items()}
    full = count_matmuls(monkeypatch, getattr(runner, phase))
    hs_after_full = np.array(runner._cache.hs)
    gemms = count_matmuls(monkeypatch, gemm_only)
    assert gemms == full > 0
    # GEMMs alone write no state: the hidden states are those the last full call left
    np.testing.assert_array_equal(runner._cache.hs, hs_after_full)
    np.testing.assert_array_equal(hs_before, hs_after_full)  # same inputs, same states
    if phase != "step":
        for name, value in weights_before.items():
            np.testing.assert_array_equal(runner.p[name], value)


def test_other_runners_have_no_gemm_only_loop(cell):
    params, x, grad_y = small_problem(cell)
    runner = rnnopt.get_variant(f"numpy-{cell}-batched").runner(params, x, grad_y)
    assert gemm_only_call(runner, "forward") is None


def test_split_metrics_add_up():
    calls = []
    metrics = split_metrics(lambda: calls.append(1), 5.0, min_time_s=0.0, min_calls=4)
    split = metrics["split"]
    assert len(calls) >= 4  # warm-up and timed calls of the GEMM-only call itself
    assert split["gemm_ms"] >= 0
    assert split["elementwise_ms"] == pytest.approx(5.0 - split["gemm_ms"])
    assert split["gemm_share"] == pytest.approx(split["gemm_ms"] / 5.0)
    assert isinstance(split["gemm_noisy"], bool)


@pytest.mark.parametrize(
    "variant, has_split",
    [("numpy-lstm-numba", True), ("numpy-rnn-fused", True), ("numpy-lstm-batched", False)],
)
def test_profile_records_carry_the_split(tmp_path, variant, has_split):
    out = tmp_path / "{phase}.json"
    argv = ["profile", "--variant", variant, *TINY, "--threads", "1", "--out", str(out)]
    assert run_cli(*argv, "--phase", "forward", "backward", *QUICK) == 0
    for phase in ("forward", "backward"):
        record = read_record(tmp_path / f"{phase}.json")  # validated against the schema
        assert record["status"] == "ok", record["reason"]
        metrics = record["metrics"]
        assert ("split" in metrics) == has_split
        if has_split:
            median = metrics["time_ms"]["median"]
            split = metrics["split"]
            assert split["elementwise_ms"] == pytest.approx(median - split["gemm_ms"])


def test_variants_table_shows_the_split(tmp_path):
    from rnnopt.report.aggregate import collect
    from rnnopt.report.table import NONE, variants_table

    profile_dir = tmp_path / "results" / "host" / "profile"
    profile_dir.mkdir(parents=True)
    for variant in ("numpy-rnn-fused", "numpy-rnn-batched"):
        out = profile_dir / f"{variant}-{{phase}}.json"
        argv = ["profile", "--variant", variant, *TINY, "--threads", "1", "--out", str(out)]
        assert run_cli(*argv, "--phase", "forward", *QUICK) == 0
    table = variants_table(collect(tmp_path / "results")[0]).set_index("variant")
    fused = read_record(profile_dir / "numpy-rnn-fused-forward.json")["metrics"]["split"]
    cell = table.loc["numpy-rnn-fused", "GEMM ms / elementwise ms (/ barrier ms)"]
    assert cell == f"{fused['gemm_ms']:.3g} / {fused['elementwise_ms']:.3g}"
    assert table.loc["numpy-rnn-batched", "GEMM ms / elementwise ms (/ barrier ms)"] == NONE
