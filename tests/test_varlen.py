"""Variable-length batching: the three ways compute the same losses (masking makes padding
exact), packing computes no padded step, buckets pad less; the command's record."""

from __future__ import annotations

import numpy as np
import pytest

from rnnopt.cli import main
from rnnopt.errors import UserError
from rnnopt.experiments import varlen
from rnnopt.models.variants import get_variant
from rnnopt.records import read_record
from rnnopt.train import data

HIDDEN = 5


@pytest.fixture(scope="module")
def dataset():
    return data.generate("sine", 24, 10, seed=0, variable_length=True, min_length=2)


def test_lengths_follow_the_documented_distribution():
    lengths = data.generate("sine", 4000, 20, seed=1, variable_length=True, min_length=3).lengths
    assert lengths.min() == 3 and lengths.max() == 20
    counts = np.bincount(lengths, minlength=21)[3:]
    assert np.all(np.abs(counts / len(lengths) - 1 / 18) < 0.02)  # uniform on [3, 20]
    default = data.generate("sine", 500, 20, seed=1, variable_length=True)
    assert default.lengths.min() == 10  # seq_len // 2, as before
    with pytest.raises(UserError, match="min_length"):
        data.generate("sine", 4, 20, seed=1, variable_length=True, min_length=21)


@pytest.mark.parametrize(
    "name", ["numpy-lstm-fused", "numpy-lstm-naive", "torch-lstm-nn", "torch-lstm-cell"]
)
def test_padded_bucketed_and_packed_losses_agree(dataset, name):
    variant = get_variant(name, dtype="float64", device="cpu")
    ways = varlen.run(variant, dataset, batch=4, hidden_size=HIDDEN, epochs=3, seed=0)
    assert [way.name for way in ways] == list(varlen.WAYS)
    assert all(len(way.losses) == 3 for way in ways)
    assert ways[0].losses[0] > ways[0].losses[-1]  # it trains
    assert varlen.loss_agreement(ways) < varlen.LOSS_RTOL["float64"]
    assert ways[-1].packed == (name == "torch-lstm-nn")  # a packed kernel only for nn.LSTM


def test_batches_of_one_sequence_need_no_padding_and_give_the_same_loss(dataset):
    """Exactness against the unpadded computation: one sequence per batch, at its own length."""
    variant = get_variant("numpy-lstm-fused", dtype="float64", device="cpu")
    alone = varlen.run(variant, dataset, batch=1, hidden_size=HIDDEN, epochs=2, seed=0)[0]
    assert alone.padding["padding_fraction"] == 0.0
    padded = varlen.run(variant, dataset, batch=24, hidden_size=HIDDEN, epochs=2, seed=0)[0]
    assert padded.padding["padding_fraction"] > 0.2
    np.testing.assert_allclose(padded.losses, alone.losses, rtol=1e-12)


def test_float32_losses_agree_within_the_documented_tolerance(dataset):
    variant = get_variant("torch-lstm-nn", dtype="float32", device="cpu")
    ways = varlen.run(variant, dataset, batch=4, hidden_size=HIDDEN, epochs=2, seed=0)
    assert varlen.loss_agreement(ways) < varlen.LOSS_RTOL["float32"]


def test_padding_fractions(dataset):
    lengths = dataset.lengths
    plans = {way: varlen.batch_plan(lengths, 4, way, seed=0) for way in varlen.WAYS}
    for plan in plans.values():  # every sequence exactly once
        assert sorted(np.concatenate(plan)) == list(range(len(lengths)))
    padded = varlen.padding_of(lengths, plans["padded"], packed=False)
    bucketed = varlen.padding_of(lengths, plans["bucketed"], packed=False)
    packed = varlen.padding_of(lengths, plans["packed"], packed=True)
    expected = sum(len(i) * lengths[i].max() for i in plans["padded"])
    assert padded["computed_tokens"] == expected
    assert padded["padding_fraction"] == pytest.approx(1 - lengths.sum() / expected)
    assert 0 <= bucketed["padding_fraction"] < padded["padding_fraction"]
    assert packed["padding_fraction"] == 0.0 and packed["computed_tokens"] == lengths.sum()


def test_varlen_command_writes_one_record(tmp_path):
    out = tmp_path / "varlen.json"
    argv = ["varlen", "--variant", "torch-lstm-nn", "--dtype", "float64", "--n-sequences", "16",
            "--seq-len", "8", "--min-length", "2", "--batch", "4", "--hidden-size", "4",
            "--epochs", "2", "--threads", "1", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    record = read_record(out)
    assert record["kind"] == "varlen" and record["status"] == "ok"
    metrics = record["metrics"]
    assert metrics["losses_agree"] is True
    assert metrics["packed"]["packed_kernel"] and metrics["packed"]["padding_fraction"] == 0.0
    assert metrics["padded"]["padding_fraction"] > metrics["bucketed"]["padding_fraction"]
    assert all(metrics[way]["peak_mib"] > 0 for way in varlen.WAYS)
    assert len(record["series"]["loss_padded"]) == 2


def test_varlen_command_rejects_min_length_above_seq_len(tmp_path, capsys):
    argv = ["varlen", "--variant", "numpy-lstm-fused", "--n-sequences", "4", "--seq-len", "4",
            "--min-length", "5", "--batch", "2", "--hidden-size", "2", "--threads", "1",
            "--out", str(tmp_path / "v.json")]  # fmt: skip
    assert main(argv) == 2
    assert "--min-length 5 exceeds --seq-len 4" in capsys.readouterr().err
    assert not (tmp_path / "v.json").exists()
