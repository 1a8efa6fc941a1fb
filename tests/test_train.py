"""Training: every float64 variant follows the same trajectory; accumulation, divergence, CLI."""

import json

import numpy as np
import pytest
import torch

from rnnopt import data, get_variant
from rnnopt.cli import main
from rnnopt.records import read_record
from rnnopt.train import TrainConfig, batch_schedule, train
from rnnopt.variants import variant_class

KINDS = ("numpy-naive", "numpy-inplace", "numpy-batched", "numpy-fused", "torch-cell", "torch-jit")
# clip_norm 0.3 fires on most (not all) steps of this problem: both branches are exercised
CONFIG = dict(steps=20, batch=8, hidden_size=6, optimizer="sgd", momentum=0.9, lr=0.1, seed=3)


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """One thread: tiny problems on a shared 2-core machine run faster and steadier."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def adding():
    return data.generate("adding", 32, 8, seed=0, variable_length=True)


@pytest.fixture(scope="module")
def reference_curves(adding):
    """Loss curves of torch-{cell}-nn float64, with and without clipping."""
    return {
        (cell, clip): train(
            get_variant(f"torch-{cell}-nn", dtype="float64"),
            adding,
            TrainConfig(**CONFIG, clip_norm=clip),
        ).series["loss"]
        for cell in ("rnn", "lstm")
        for clip in (None, 0.3)
    }


def run(name, dataset, dtype="float64", **overrides):
    return train(get_variant(name, dtype=dtype), dataset, TrainConfig(**{**CONFIG, **overrides}))


@pytest.mark.parametrize("clip", [None, 0.3], ids=["noclip", "clip"])
@pytest.mark.parametrize("kind", KINDS)
def test_float64_variants_follow_torch_nn(kind, clip, cell, adding, reference_curves):
    result = run(kind.replace("-", f"-{cell}-"), adding, clip_norm=clip)
    assert result.status == "ok"
    assert len(result.series["loss"]) == CONFIG["steps"]
    expected = reference_curves[(cell, clip)]
    assert np.max(np.abs(np.subtract(result.series["loss"], expected))) <= 1e-8
    fraction = result.metrics["clip_fraction"]
    assert 0 < fraction < 1 if clip else fraction == 0


@pytest.mark.slow  # Inductor compiles a training and an eval graph: ~20 s cold on 2 cores
def test_compiled_variant_follows_torch_nn(adding, reference_curves):
    result = run("torch-rnn-compile", adding, clip_norm=0.3)
    expected = reference_curves[("rnn", 0.3)]
    assert np.max(np.abs(np.subtract(result.series["loss"], expected))) <= 1e-8


@pytest.mark.parametrize("task", ["copy", "sine"])
@pytest.mark.parametrize("name", ["numpy-lstm-batched", "torch-lstm-cell"])
def test_per_step_losses_match_across_frameworks(task, name):
    dataset = data.generate(task, 32, 14, seed=1, variable_length=True, **_small(task))
    expected = run("torch-lstm-nn", dataset, optimizer="adam", lr=0.01, momentum=0.0)
    result = run(name, dataset, optimizer="adam", lr=0.01, momentum=0.0)
    assert np.max(np.abs(np.subtract(result.series["loss"], expected.series["loss"]))) <= 1e-8
    assert result.metrics["final_metric"] == pytest.approx(expected.metrics["final_metric"])


def _small(task):
    return {"copy_len": 3, "n_symbols": 4} if task == "copy" else {}


@pytest.mark.parametrize("name", ["numpy-rnn-fused", "torch-rnn-cell"])
@pytest.mark.parametrize("task", ["adding", "sine"])
def test_accumulation_equals_one_big_batch(name, task):
    dataset = data.generate(task, 32, 10, seed=2, variable_length=True)
    whole = run(name, dataset, batch=8, accumulate=1, clip_norm=0.3, steps=10)
    parts = run(name, dataset, batch=2, accumulate=4, clip_norm=0.3, steps=10)
    np.testing.assert_allclose(parts.series["loss"], whole.series["loss"], rtol=0, atol=1e-10)
    np.testing.assert_allclose(
        parts.series["grad_norm"], whole.series["grad_norm"], rtol=1e-10, atol=0
    )


@pytest.mark.parametrize("name", ["numpy-lstm-inplace", "torch-lstm-cell"])
def test_huge_lr_diverges_without_exception(name, adding):
    result = run(name, adding, dtype="float32", lr=1e30, momentum=0.0, steps=50)
    assert result.status == "diverged"
    assert "became" in result.reason
    completed = result.metrics["steps_completed"]
    assert 0 < completed < 50
    assert len(result.series["loss"]) == len(result.series["grad_norm"]) == completed
    assert np.all(np.isfinite(result.series["loss"]))
    assert "final_metric" not in result.metrics


@pytest.mark.parametrize("name", ["numpy-lstm-naive", "torch-lstm-jit"])
def test_same_seed_same_curve(name, adding):
    first, second = run(name, adding, steps=8), run(name, adding, steps=8)
    assert first.series["loss"] == second.series["loss"]
    assert first.series["grad_norm"] == second.series["grad_norm"]
    assert run(name, adding, steps=8, seed=4).series["loss"] != first.series["loss"]


def test_batch_schedule_permutes_each_epoch():
    steps = list(batch_schedule(10, 3, 7, seed=0))  # 3 steps per epoch, one sequence dropped
    assert all(len(indices) == 3 for indices in steps)
    for epoch in (steps[0:3], steps[3:6]):
        assert len(set(np.concatenate(epoch))) == 9
    assert not np.array_equal(np.concatenate(steps[0:3]), np.concatenate(steps[3:6]))
    again = list(batch_schedule(10, 3, 7, seed=0))
    assert all(np.array_equal(a, b) for a, b in zip(steps, again, strict=True))


# ------------------------------------------------------------------ CLI


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory, adding):
    return str(data.save(adding, tmp_path_factory.mktemp("data") / "adding.npz"))


def cli(dataset_path, out, *extra):
    args = ["train", "--data", dataset_path, "--steps", "6", "--batch", "4"]
    args += ["--hidden-size", "5", "--lr", "0.05", "--seed", "1", "--out", str(out), *extra]
    return main(args)


def test_cli_writes_a_valid_train_record(dataset_path, tmp_path):
    out = tmp_path / "train.json"
    extra = ["--variant", "numpy-lstm-fused", "--dtype", "float64", "--optimizer", "adam"]
    assert cli(dataset_path, out, *extra, "--clip-norm", "1", "--accumulate", "2") == 0
    record = read_record(out)  # validates against the schema
    assert record["kind"] == "train" and record["status"] == "ok"
    assert record["variant"] == "numpy-lstm-fused" and record["task"] == "adding"
    assert record["shape"] == {"batch": 4, "seq_len": 8, "input_size": 2, "hidden_size": 5}
    assert record["config"]["accumulate"] == 2 and record["config"]["optimizer"] == "adam"
    metrics = record["metrics"]
    for key in ("final_loss", "final_metric", "baseline_loss", "time_per_step_ms"):
        assert isinstance(metrics[key], float), key
    assert metrics["steps_completed"] == 6 and 0 <= metrics["clip_fraction"] <= 1
    assert metrics["tokens_per_s"] > 0
    assert len(record["series"]["loss"]) == len(record["series"]["grad_norm"]) == 6


def test_cli_float16_on_cpu_writes_skipped(dataset_path, tmp_path):
    out = tmp_path / "train.json"
    assert cli(dataset_path, out, "--variant", "torch-rnn-cell", "--dtype", "float16") == 0
    record = read_record(out)
    assert record["status"] == "skipped" and "float16" in record["reason"]
    assert record["variant"] == "torch-rnn-cell" and record["dtype"] == "float16"


@pytest.mark.parametrize(("error", "status"), [(RuntimeError, "failed"), (MemoryError, "oom")])
def test_cli_records_errors_of_the_variant(dataset_path, tmp_path, monkeypatch, error, status):
    def broken(self, p, x):
        raise error("boom\nsecond line")

    monkeypatch.setattr(variant_class("numpy-rnn-naive"), "forward_train", broken)
    out = tmp_path / "train.json"
    assert cli(dataset_path, out, "--variant", "numpy-rnn-naive", "--dtype", "float64") == 0
    record = json.loads(out.read_text())
    assert record["status"] == status
    assert record["reason"] == f"{error.__name__}: boom second line"


def test_cli_rejects_a_batch_larger_than_the_dataset(dataset_path, tmp_path, capsys):
    out = tmp_path / "train.json"
    assert cli(dataset_path, out, "--variant", "numpy-rnn-naive", "--accumulate", "9") == 2
    assert "batch * accumulate" in capsys.readouterr().err
    assert not out.exists()
