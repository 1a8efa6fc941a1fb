"""Verification against the reference: table, a deliberately broken variant, records."""

import pytest
import torch

from rnnopt import get_variant
from rnnopt.cli import main
from rnnopt.models.variants import variant_class
from rnnopt.models.verify import (
    ARRAY_NAMES,
    TOLERANCES,
    combinations,
    verify_reference,
    verify_variant,
)
from rnnopt.records import read_record


@pytest.fixture
def broken_forward(monkeypatch):
    """numpy-rnn-naive with 1e-3 added to every output: relative error >= 1e-3."""
    cls = variant_class("numpy-rnn-naive")
    forward = cls.forward
    monkeypatch.setattr(cls, "forward", lambda self, params, x: forward(self, params, x) + 1e-3)


def test_reference_agrees_with_torch_autograd(cell):
    result = verify_reference(cell)
    assert result.passed and max(result.errors.values()) < 1e-12


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_variant_passes_within_its_dtype_tolerance(cell, dtype):
    result = verify_variant(get_variant(f"numpy-{cell}-fused", dtype=dtype))
    assert set(result.errors) == set(ARRAY_NAMES)
    assert result.passed and result.tolerance == TOLERANCES[dtype]


def test_combinations_follow_what_each_variant_supports():
    triples = combinations(["numpy-rnn-naive", "torch-rnn-nn"], devices=["cpu"])
    assert ("numpy-rnn-naive", "float64", "cpu") in triples
    assert ("torch-rnn-nn", "bfloat16", "cpu") in triples
    assert not any(dtype in ("float16",) for _, dtype, _ in triples)  # not on CPU
    assert not any(name.startswith("numpy") and dtype == "bfloat16" for name, dtype, _ in triples)


def test_table_for_a_couple_of_variants(capsys):
    code = main(["verify", "--variant", "numpy-rnn-naive,torch-lstm-nn", "--device", "cpu"])
    out = capsys.readouterr().out
    assert code == 0
    rows = [line for line in out.splitlines() if line.startswith(("numpy", "torch"))]
    # numpy: float64, float32; torch: float64, float32, bfloat16
    assert len(rows) == 5 and all(row.rstrip().endswith("PASS") for row in rows)
    assert "worst gradient" in out


def test_broken_variant_is_reported_fail(broken_forward, capsys):
    code = main(["verify", "--variant", "numpy-rnn-naive", "--dtype", "float64,float32"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("numpy")]
    assert code == 1
    assert len(rows) == 2 and all(row.rstrip().endswith("FAIL") for row in rows)


def test_record_written_and_valid(tmp_path):
    out = tmp_path / "verify.json"
    args = ["--variant", "torch-rnn-cell", "--dtype", "bfloat16", "--device", "cpu"]
    assert main(["verify", *args, "--out", str(out)]) == 0
    record = read_record(out)
    assert record["kind"] == "verify" and record["status"] == "ok"
    assert record["variant"] == "torch-rnn-cell" and record["dtype"] == "bfloat16"
    metrics = record["metrics"]
    assert set(metrics["max_rel_error"]) == set(ARRAY_NAMES)
    assert metrics["passed"] is True and metrics["tolerance"] == TOLERANCES["bfloat16"]
    assert max(metrics["max_rel_error"].values()) > 1e-4  # it did run in bfloat16


def test_record_of_a_broken_variant_says_not_passed(broken_forward, tmp_path):
    out = tmp_path / "verify.json"
    args = ["--variant", "numpy-rnn-naive", "--dtype", "float64", "--device", "cpu"]
    assert main(["verify", *args, "--out", str(out)]) == 0  # a FAIL is a measurement
    metrics = read_record(out)["metrics"]
    assert metrics["passed"] is False and metrics["max_rel_error"]["output"] >= 1e-3


@pytest.mark.parametrize(
    ("dtype", "device"),
    [
        ("float16", "cpu"),
        pytest.param(
            "float32", "cuda", marks=pytest.mark.skipif(torch.cuda.is_available(), reason="GPU")
        ),
    ],
)
def test_unavailable_combination_writes_skipped(tmp_path, dtype, device):
    out = tmp_path / "verify.json"
    args = ["--variant", "torch-lstm-cell", "--dtype", dtype, "--device", device]
    assert main(["verify", *args, "--out", str(out)]) == 0
    record = read_record(out)
    assert record["status"] == "skipped" and record["reason"]
    assert (record["variant"], record["dtype"], record["device"]) == (
        "torch-lstm-cell",
        dtype,
        device,
    )


def test_out_needs_one_combination(tmp_path, capsys):
    out = tmp_path / "verify.json"
    assert main(["verify", "--variant", "numpy-rnn-naive", "--out", str(out)]) == 2
    assert "exactly one" in capsys.readouterr().err


def test_jobs_write_one_record_each_in_one_process(broken_forward, tmp_path):
    template = str(tmp_path / "{variant}" / "{device}-{dtype}.json")
    jobs = [
        "numpy-rnn-naive:cpu:float64",
        "numpy-lstm-fused:cpu:float32",
        "torch-lstm-cell:cpu:float16",
    ]
    assert main(["verify", "--jobs", *jobs, "--out", template]) == 0
    keys = ("variant", "device", "dtype")
    records = [
        read_record(template.format(**dict(zip(keys, job.split(":"), strict=True)))) for job in jobs
    ]
    naive, fused, half = records
    assert naive["status"] == "ok" and naive["metrics"]["passed"] is False  # the broken one
    assert fused["status"] == "ok" and fused["metrics"]["passed"] is True
    assert (fused["variant"], fused["device"], fused["dtype"]) == (
        "numpy-lstm-fused",
        "cpu",
        "float32",
    )
    assert half["status"] == "skipped" and half["dtype"] == "float16"
    assert fused["config"]["jobs"] is None and fused["config"]["variant"] == ["numpy-lstm-fused"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--jobs", "numpy-rnn-naive:cpu:float64", "--out", "x.json"], "{variant}"),
        (
            [
                "--jobs",
                "numpy-rnn-naive:cpu:float64",
                "--variant",
                "numpy-rnn-naive",
                "--out",
                "{variant}/{device}-{dtype}.json",
            ],
            "leave out",
        ),
    ],
)
def test_jobs_need_a_template_and_no_other_choice(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    assert main(["verify", *argv]) == 2
    assert message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "job", ["numpy-rnn-naive:cpu", "no-such:cpu:float32", "numpy-rnn-naive:tpu:float32"]
)
def test_a_bad_job_is_refused_by_name(capsys, job):
    with pytest.raises(SystemExit) as exit:
        main(["verify", "--jobs", job, "--out", "{variant}/{device}-{dtype}.json"])
    assert exit.value.code == 2
    assert job in capsys.readouterr().err
