"""The batching experiments' report: verdict rules on synthetic records, rows that say "not
measured here" without records, and both figures."""

from __future__ import annotations

import math

import matplotlib.image
import numpy as np
from scipy import stats

from rnnopt.experiments import autobatch
from rnnopt.experiments.autobatch import Point, Timing
from rnnopt.measure.host import fingerprint
from rnnopt.records import make_record, write_record
from rnnopt.report.aggregate import collect
from rnnopt.report.experiments import batching as eb

ENV = fingerprint()
SHAPE = {"batch": 8, "seq_len": 4, "input_size": 2, "hidden_size": 3}


def autobatch_record(
    measure, budget_mib=20.0, max_batch=256, status="ok", reason=None, again=None, rounds=5
):
    """A record of the search over `measure`, confirmed by `again(batches) -> [Timing, ...]`
    (one call a round) where given."""
    fields = dict(variant="numpy-lstm-fused", framework="numpy", cell="lstm", dtype="float32",
                  device="cpu", phase="step", threads=1, seed=0, config={}, env=ENV)  # fmt: skip
    if status != "ok":
        return make_record("autobatch", status=status, reason=reason, **fields)
    result = autobatch.search(measure, budget_mib, max_batch)
    if again is not None:
        result = autobatch.confirm(result, again, rounds)
    return make_record(
        "autobatch",
        metrics=autobatch.summary(result),
        series=autobatch.series(result),
        shape=SHAPE | {"batch": result.pick.batch},
        **fields,
    )


def way(median_ms, iqr_ms, padding, packed=False, epochs=5):
    return {"padding_fraction": padding, "packed_kernel": packed, "peak_mib": 1.0,
            "epoch_ms": {"median": median_ms, "iqr": iqr_ms, "min": median_ms,
                         "mean": median_ms, "n": epochs}}  # fmt: skip


def epoch_series(bucketed_ms, packed_ms, epochs, series=None):
    """epoch_ms_<way>: a warm-up epoch and `epochs` timed ones, every way's moved alike by the
    host from epoch to epoch (they run interleaved); or `series` as given."""
    drift = [1.3, 1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 1.01][: epochs + 1]
    ways = {"padded": 100.0, "bucketed": bucketed_ms, "packed": packed_ms}
    return series or {f"epoch_ms_{way}": [ms * d for d in drift] for way, ms in ways.items()}


def varlen_record(
    variant, bucketed_ms, packed_ms, packed_kernel, worst=1e-8, epochs=5, series=None, iqr=2.0
):
    metrics = {
        "padded": way(100.0, iqr, 0.4, epochs=epochs),
        "bucketed": way(bucketed_ms, iqr, 0.08, epochs=epochs),
        "packed": way(packed_ms, iqr, 0.0 if packed_kernel else 0.4, packed_kernel, epochs),
        "loss_max_rel_diff": worst,
        "loss_rtol": 1e-4,
        "losses_agree": worst <= 1e-4,
    }
    framework = variant.split("-")[0]
    return make_record("varlen", variant=variant, framework=framework, cell="lstm",
                       dtype="float32", device="cpu", task="sine", phase="step", shape=SHAPE,
                       threads=1, seed=0, config={}, metrics=metrics, env=ENV,
                       series=epoch_series(bucketed_ms, packed_ms, epochs, series))  # fmt: skip


def linear(batch):  # tokens/s rising with B, peak 2 + 0.5 B MiB
    return Point(batch, 100.0 * batch / (1 + batch / 64), 2 + 0.5 * batch)


def small_batches_fastest(batch):  # throughput peaks at B=4, far below what fits
    return Point(batch, 1000.0 / (1 + abs(batch - 4)), 2 + 0.5 * batch)


def quadratic(batch):
    return Point(batch, float(batch), 1 + 0.01 * batch**2)


def table_of(tmp_path, records: dict[str, dict]):
    for relative, record in records.items():
        write_record(tmp_path / "results" / relative, record)
    metrics, series = collect(tmp_path / "results")
    return eb.table(metrics, series), metrics, series


def verdicts(frame, experiment):
    return list(frame[frame["experiment"] == experiment]["verdict"])


PICK = "automatic batch size under a memory budget"
LINEAR = "peak memory linear in the batch size"
BUCKETS = "length-sorted buckets vs padding each batch"
PACKED = "packed sequences vs padding each batch"
EXACT = "masking makes padding exact (equal losses)"


def test_autobatch_verdicts(tmp_path):
    frame, _, _ = table_of(
        tmp_path,
        {
            "a/autobatch/x/cpu-float32.json": autobatch_record(linear),
            "b/autobatch/x/cpu-float32.json": autobatch_record(small_batches_fastest),
            "c/autobatch/x/cpu-float32.json": autobatch_record(quadratic, budget_mib=50.0),
            "d/autobatch/x/cpu-float32.json": autobatch_record(linear, budget_mib=1e6),
        },
    )
    by_run = {run: group for run, group in frame.groupby("run")}
    assert verdicts(by_run["a"], PICK)[0].startswith("supported: the largest fitting batch B=36")
    assert verdicts(by_run["a"], LINEAR) == ["supported"]
    assert verdicts(by_run["b"], PICK)[0].startswith("not supported: B=4 gives")
    assert verdicts(by_run["c"], LINEAR)[0].startswith("not supported: R^2")
    assert verdicts(by_run["d"], PICK)[0].startswith("not measured here: the budget never binds")
    assert "pick B=36" in by_run["a"][by_run["a"]["experiment"] == PICK]["result"].iloc[0]


def spelled_linear(batch):  # linear's points, but B=32's one timing far ahead of B=36
    point = linear(batch)
    return Point(batch, 5000.0, point.peak_mib) if batch == 32 else point


def rounds_of(rates: dict[int, list[float]], probes=None):
    """again(batches) -> a round: the next of each batch's given tokens/s, with the next of
    `probes` (1 ms each without)."""
    left = {batch: iter(values) for batch, values in rates.items()}
    probe = iter(probes or [1.0] * 100)
    return lambda batches: [Timing(b, next(left[b]), next(probe)) for b in batches]


def test_autobatch_verdict_reads_the_confirmation_rounds(tmp_path):
    """The search's one timing a point said B=32 beat the largest fitting B=36 (a slow spell
    on B=36's timing, say); the rounds decide, judged by their ratio's interval."""
    even = {32: [0.90, 0.92, 0.91, 0.89, 0.90], 36: [1.0, 1.01, 0.99, 1.0, 1.02]}
    faster = {32: [1.20, 1.22, 1.18, 1.21, 1.19], 36: [1.0, 1.01, 0.99, 1.0, 1.02]}
    close = {32: [1.0, 1.12, 0.98, 1.10, 1.05], 36: [1.0, 1.01, 0.99, 1.0, 1.02]}
    frame, _, _ = table_of(
        tmp_path,
        {
            f"{run}/autobatch/x/cpu-float32.json": autobatch_record(
                spelled_linear, again=rounds_of(r)
            )
            for run, r in (("a", even), ("b", faster), ("c", close))
        },
    )
    by_run = {run: group for run, group in frame.groupby("run")}
    a, b, c = (verdicts(by_run[run], PICK)[0] for run in "abc")
    # by hand, paired by round: exp(mean log(a_k / b_k) +- t(4) sd / sqrt(5))
    assert a.startswith("supported: the largest fitting batch B=36 is (within 5%) the fastest")
    assert "B=32 gives 0.90x (0.88-0.92) the tokens/s of the largest fitting B=36" in a
    assert b.startswith("not supported: B=32 gives 1.20x (1.17-1.22)")
    assert c.startswith("inconclusive: B=32 gives 1.04x (0.98-1.12)")
    result = by_run["a"][by_run["a"]["experiment"] == PICK]["result"].iloc[0]
    assert "pick B=36" in result and "timed again side by side over 5 rounds" in result
    assert "pick B=32" in by_run["b"][by_run["b"]["experiment"] == PICK]["result"].iloc[0]


def test_autobatch_verdict_leaves_out_rounds_in_a_slow_spell(tmp_path):
    """Round 2's probes read 2x the median: the confirmation timed a sixth round in its place,
    and the report pairs the five others alone (in the spell B=32 timed 1.5x)."""
    rates = {32: [0.90, 1.35, 0.91, 0.89, 0.90, 0.91], 36: [1.0, 1.0, 0.99, 1.0, 1.02, 1.0]}
    probes = [1.0, 1.0, 2.0, 2.0] + [1.0] * 8
    record = autobatch_record(spelled_linear, again=rounds_of(rates, probes))
    frame, _, _ = table_of(tmp_path, {"a/autobatch/x/cpu-float32.json": record})
    verdict = verdicts(frame, PICK)[0]
    assert verdict.startswith("supported: the largest fitting batch B=36")
    result = frame[frame["experiment"] == PICK]["result"].iloc[0]
    assert "over 5 rounds (1 more left out: a slow spell)" in result
    # every round in a spell: ten rounds (five more at most), and all of them kept
    rates = {32: [0.9] * 10, 36: [1.0, 1.01] * 5}
    record = autobatch_record(spelled_linear, again=rounds_of(rates, [1.0, 2.0] * 10))
    frame, _, _ = table_of(tmp_path / "all", {"a/autobatch/x/cpu-float32.json": record})
    result = frame[frame["experiment"] == PICK]["result"].iloc[0]
    assert "over 10 rounds (10 in a slow spell, kept: too few without)" in result


def test_budget_too_small_says_why(tmp_path):
    reason = "budget_mib=1 is too small: batch 1 already peaks at 3.00 MiB; no batch size fits"
    record = autobatch_record(None, status="skipped", reason=reason)
    frame, _, _ = table_of(tmp_path, {"a/autobatch/x/cpu-float32.json": record})
    assert verdicts(frame, PICK) == [f"not measured here: skipped: {reason}"]


def test_varlen_verdicts(tmp_path):
    frame, _, _ = table_of(
        tmp_path,
        {
            "a/varlen/torch-lstm-nn/cpu-float32.json": varlen_record(
                "torch-lstm-nn", bucketed_ms=60.0, packed_ms=300.0, packed_kernel=True
            ),
            "a/varlen/numpy-lstm-fused/cpu-float32.json": varlen_record(
                "numpy-lstm-fused", bucketed_ms=99.0, packed_ms=100.0, packed_kernel=False
            ),
            "b/varlen/torch-lstm-nn/cpu-float32.json": varlen_record(
                "torch-lstm-nn", bucketed_ms=60.0, packed_ms=60.0, packed_kernel=True, worst=0.01
            ),
            "c/varlen/torch-lstm-nn/cpu-float32.json": varlen_record(
                "torch-lstm-nn", bucketed_ms=60.0, packed_ms=60.0, packed_kernel=True, epochs=1
            ),
        },
    )
    a, b = frame[frame["run"] == "a"], frame[frame["run"] == "b"]
    numpy_rows, torch_rows = (
        a[a["result"].str.startswith("numpy")],
        a[a["result"].str.startswith("torch")],
    )
    assert verdicts(torch_rows, BUCKETS)[0].startswith("supported: 1.67x (1.67-1.67) faster")
    assert verdicts(torch_rows, PACKED)[0].startswith("not supported: slower (0.33x")
    assert verdicts(numpy_rows, BUCKETS)[0].startswith(
        "not supported: no meaningful difference (1.01x"
    )
    assert verdicts(numpy_rows, PACKED)[0].startswith("not measured here: no packed kernel")
    assert verdicts(a, EXACT)[0].startswith("supported")
    assert verdicts(b, EXACT)[0].startswith("not supported: 1.0e-02 > tolerance")
    assert verdicts(b, BUCKETS)[0].startswith("not supported: the losses differ")
    c = frame[frame["run"] == "c"]
    assert verdicts(c, BUCKETS) == ["not measured here: fewer than 3 timed epochs"]


def test_varlen_speedup_is_paired_by_epoch(tmp_path):
    """Run BK's numpy epochs: the host ran the first four epochs of every way about 1.5x
    slower than the last four. Medians +- IQR/2 made that 0.94-2.57x, "no clear speedup";
    the ways run interleaved, so epoch k of each is a pair: exp(mean log ratio +- t(6) sd /
    sqrt 7) over the seven timed epochs (the first is the warm-up)."""
    padded = [124.8, 93.0, 93.6, 101.0, 63.5, 63.3, 62.9, 62.9]
    bucketed = [70.0, 63.8, 58.7, 66.3, 41.1, 40.3, 39.7, 40.4]
    series = {"epoch_ms_padded": padded, "epoch_ms_bucketed": bucketed, "epoch_ms_packed": padded}
    record = varlen_record("numpy-lstm-fused", 58.7, 63.5, False, epochs=7, series=series, iqr=30)
    frame, _, _ = table_of(tmp_path, {"a/varlen/numpy-lstm-fused/cpu-float32.json": record})
    logs = np.log(np.array(padded[1:]) / np.array(bucketed[1:]))
    half = stats.t.ppf(0.975, 6) * logs.std(ddof=1) / math.sqrt(7)
    by_hand = [math.exp(logs.mean() + k * half) for k in (0, -1, 1)]
    assert [round(x, 2) for x in by_hand] == [1.55, 1.50, 1.59]
    assert verdicts(frame, BUCKETS) == ["supported: 1.55x (1.50-1.59) faster per epoch"]
    result = frame[frame["experiment"] == BUCKETS]["result"].iloc[0]
    assert "(1.55x (1.50-1.59), paired by epoch)" in result
    # the report's threshold (rnnopt report --threshold) judges it, not the default 5%
    metrics, series = collect(tmp_path / "results")
    at = {t: verdicts(eb.table(metrics, series, threshold=t), BUCKETS)[0] for t in (0.55, 0.7)}
    assert at[0.55] == "inconclusive: 1.55x (1.50-1.59) crosses the 55% threshold"
    assert at[0.7] == "not supported: no meaningful difference (1.55x (1.50-1.59))"
    assert "above 1.55x, no meaningful difference inside 0.645-1.55x" in eb.about(0.55)
    # pairs that scatter across the 5% threshold: inconclusive, not "not supported"
    wobbly = {
        "epoch_ms_padded": [100.0] * 6,
        "epoch_ms_bucketed": [100.0, 90.0, 99.0, 92.0, 101.0, 94.0],
        "epoch_ms_packed": [100.0] * 6,
    }
    record = varlen_record("torch-lstm-nn", 95.0, 100.0, True, series=wobbly)
    frame, _, _ = table_of(tmp_path / "b", {"a/varlen/torch-lstm-nn/cpu-float32.json": record})
    assert verdicts(frame, BUCKETS)[0].startswith("inconclusive: 1.05x (")
    # a record of an older run keeps no epoch times: no interval, no speed verdict
    record = varlen_record("torch-lstm-nn", 60.0, 300.0, True)
    del record["series"]
    frame, _, _ = table_of(tmp_path / "c", {"a/varlen/torch-lstm-nn/cpu-float32.json": record})
    assert verdicts(frame, BUCKETS) == [
        "not judged: the record keeps no epoch times (an older run)"
    ]


def test_without_records_every_row_says_not_measured(tmp_path):
    record = varlen_record("torch-lstm-nn", 60.0, 60.0, True)
    frame, metrics, series = table_of(tmp_path, {"a/varlen/torch-lstm-nn/cpu-float32.json": record})
    assert verdicts(frame, PICK) == ["not measured here: no autobatch record"]
    missing = eb.draw(metrics, series, tmp_path / "figures")
    assert missing["autobatch"] == "no ok autobatch records" and missing["varlen"] == ""
    empty = eb.table(metrics.iloc[0:0], series.iloc[0:0])
    assert set(empty["verdict"].str[:17]) == {"not measured here"}


def test_figures_are_drawn(tmp_path):
    _, metrics, series = table_of(
        tmp_path,
        {
            "a/autobatch/x/cpu-float32.json": autobatch_record(linear),
            "a/varlen/torch-lstm-nn/cpu-float32.json": varlen_record(
                "torch-lstm-nn", 60.0, 300.0, True
            ),
        },
    )
    assert eb.draw(metrics, series, tmp_path / "figures") == {"autobatch": "", "varlen": ""}
    for name in eb.FIGURES:
        height, width = matplotlib.image.imread(tmp_path / "figures" / f"{name}.png").shape[:2]
        assert width >= 600 and height >= 400
