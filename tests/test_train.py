"""Training: every float64 variant follows the same trajectory; accumulation, divergence, CLI."""

import json

import numpy as np
import pytest
import torch

from rnnopt import get_variant
from rnnopt.cli import main
from rnnopt.models.variants import variant_class
from rnnopt.records import fast_ms, read_record
from rnnopt.report.verdicts import LEARNED_RATIO
from rnnopt.train import data
from rnnopt.train.heads import head_loss
from rnnopt.train.loop import TrainConfig, batch_schedule, holdout_split, train
from tests.conftest import fresh_python

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


# ------------------------------------------------------------------ held-out split


@pytest.mark.parametrize(("n", "fraction", "heldout"), [(32, 0.2, 6), (10, 0.5, 5), (3, 0.01, 1)])
def test_holdout_split_is_the_disjoint_deterministic_tail(n, fraction, heldout):
    training, held = holdout_split(n, fraction)
    assert len(held) == heldout and len(training) == n - heldout
    assert np.array_equal(np.concatenate([training, held]), np.arange(n))  # disjoint, complete
    again = holdout_split(n, fraction)
    assert np.array_equal(again[0], training) and np.array_equal(again[1], held)


def test_heldout_sequences_are_never_trained_on(adding):
    """Other held-out contents change the held-out curve, never the training curve."""
    changed = data.Dataset(adding.x.copy(), adding.target.copy(), adding.lengths, adding.manifest)
    _, held = holdout_split(len(adding.x), 0.2)
    changed.x[held] = np.random.default_rng(9).uniform(size=changed.x[held].shape)
    changed.target[held] += 0.5
    first, second = run("numpy-lstm-fused", adding), run("numpy-lstm-fused", changed)
    assert first.series["loss"] == second.series["loss"]
    assert first.series["heldout_loss"] != second.series["heldout_loss"]
    assert first.metrics["training_sequences"] == len(adding.x) - len(held)


def test_heldout_baseline_is_the_training_mean_predictor(adding):
    result = run("numpy-rnn-batched", adding, steps=4, eval_every=2)
    training, held = holdout_split(len(adding.x), 0.2)
    train_mean = adding.target[training].mean()
    expected = np.mean((adding.target[held] - train_mean) ** 2)
    assert result.metrics["heldout_baseline_loss"] == pytest.approx(expected, rel=1e-12)
    assert result.series["eval_step"] == [0, 2, 4]
    assert len(result.series["heldout_loss"]) == 3
    assert result.metrics["heldout_loss"] == result.series["heldout_loss"][-1]
    ratio = result.metrics["heldout_loss"] / expected
    assert result.metrics["heldout_loss_ratio"] == pytest.approx(ratio)


def test_class_baseline_counts_training_frequencies_from_one():
    loss = head_loss({"loss": "xent_steps", "output_size": 3, "parameters": {"n_symbols": 2}})
    fit, held = np.array([0, 0, 0, 1]), np.array([0, 2])
    probabilities = np.array([4, 2, 1]) / 7  # counts 3, 1, 0 plus one each
    expected = -np.mean(np.log(probabilities[held]))
    assert loss.constant_baseline(fit, held) == pytest.approx(expected)


def test_heldout_loss_does_not_depend_on_the_eval_batch_padding():
    """13 held-out sequences in batches of 4: the filler rows of the last batch are not scored."""
    dataset = data.generate("sine", 64, 6, seed=5)
    by_four = run("torch-lstm-nn", dataset, batch=4, steps=1, lr=1e-12, momentum=0.0)
    by_one = run("torch-lstm-nn", dataset, batch=1, steps=1, lr=1e-12, momentum=0.0)
    assert by_four.metrics["heldout_sequences"] == 13
    assert by_four.series["heldout_loss"][0] == pytest.approx(by_one.series["heldout_loss"][0])


def test_a_small_easy_run_learns():
    """Next-step sine forecasting, 80 Adam steps: well below the predict-the-mean baseline."""
    dataset = data.generate("sine", 160, 12, seed=0)
    result = run(
        "torch-lstm-nn",
        dataset,
        dtype="float32",
        steps=80,
        batch=16,
        hidden_size=8,
        optimizer="adam",
        lr=0.05,
        momentum=0.0,
        eval_every=40,
    )
    assert result.status == "ok"
    assert result.series["heldout_loss"][0] > result.metrics["heldout_baseline_loss"]
    assert result.metrics["heldout_loss_ratio"] <= LEARNED_RATIO


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
    extra += ["--clip-norm", "1", "--accumulate", "2", "--eval-every", "4", "--process", "2"]
    assert cli(dataset_path, out, *extra) == 0
    record = read_record(out)  # validates against the schema
    assert record["kind"] == "train" and record["status"] == "ok"
    assert record["process"] == 2
    assert record["variant"] == "numpy-lstm-fused" and record["task"] == "adding"
    assert record["shape"] == {"batch": 4, "seq_len": 8, "input_size": 2, "hidden_size": 5}
    assert record["config"]["accumulate"] == 2 and record["config"]["optimizer"] == "adam"
    metrics = record["metrics"]
    for key in ("final_loss", "final_metric", "baseline_loss", "time_per_step_ms"):
        assert isinstance(metrics[key], float), key
    for key in ("heldout_loss", "heldout_baseline_loss", "heldout_loss_ratio"):
        assert isinstance(metrics[key], float), key
    assert record["series"]["eval_step"] == [0, 4, 6]  # --eval-every 4, and after the last
    assert metrics["steps_completed"] == 6 and 0 <= metrics["clip_fraction"] <= 1
    assert metrics["tokens_per_s"] > 0
    # the 10th percentile of the steps after the warm-up (records.fast_ms), at most their median
    timed = record["series"]["step_time_ms"][3:]
    assert metrics["time_per_step_q10_ms"] == pytest.approx(fast_ms(timed))
    assert metrics["time_per_step_q10_ms"] <= metrics["time_per_step_ms"]
    assert len(record["series"]["loss"]) == len(record["series"]["grad_norm"]) == 6


def test_cli_untimed_leaves_the_timing_out(dataset_path, tmp_path):
    out = tmp_path / "train.json"
    extra = ["--variant", "numpy-lstm-fused", "--dtype", "float64", "--untimed"]
    assert cli(dataset_path, out, *extra) == 0
    record = read_record(out)
    assert record["status"] == "ok"
    for key in ("time_per_step_ms", "time_per_step_q10_ms", "first_step_ms", "tokens_per_s"):
        assert key not in record["metrics"], key
    assert "step_time_ms" not in record["series"]
    assert len(record["series"]["loss"]) == record["metrics"]["steps_completed"] == 6
    assert any(note.startswith("untimed") for note in record["notes"])


def test_cli_numpy_training_leaves_torch_unimported(dataset_path, tmp_path):
    """A numpy variant's training process pays no torch import (2-3 s): --threads sets the
    BLAS and numba pools only."""
    script = (
        "import sys\n"
        "from rnnopt.cli import main\n"
        f"code = main(['train', '--data', {dataset_path!r}, '--steps', '3', '--batch', '4',"
        " '--hidden-size', '5', '--lr', '0.05', '--threads', '1', '--variant', 'numpy-lstm-fused',"
        f" '--out', {str(tmp_path / 'train.json')!r}])\n"
        "print(code, 'torch' in sys.modules)\n"
    )
    assert fresh_python(script)[-2:] == ["0", "False"]
    record = read_record(tmp_path / "train.json")
    assert record["status"] == "ok" and record["threads_effective"]["requested"] == 1


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
