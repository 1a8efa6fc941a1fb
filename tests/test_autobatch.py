"""The automatic batch-size search on synthetic cost models (known optimum, binding budgets,
a budget too small for B=1), and the `rnnopt autobatch` command end to end on a tiny shape."""

from __future__ import annotations

import json

import pytest

from rnnopt.cli import main
from rnnopt.errors import UserError
from rnnopt.experiments import autobatch
from rnnopt.experiments.autobatch import NothingFits, Point, Timing, linear_fit, search
from rnnopt.records import read_record

INTERCEPT_MIB, SLOPE_MIB = 2.0, 0.5  # peak(B) = 2 + 0.5 B MiB
OPTIMUM = 64


def synthetic(batch: int, calls: list[int] | None = None) -> Point:
    """Throughput B / (1 + (B/64)^2) peaks at B=64; memory linear in B."""
    if calls is not None:
        calls.append(batch)
    tokens_per_s = 1000.0 * batch / (1.0 + (batch / OPTIMUM) ** 2)
    return Point(batch, tokens_per_s, INTERCEPT_MIB + SLOPE_MIB * batch)


def largest_fitting(budget_mib: float) -> int:
    return int((budget_mib - INTERCEPT_MIB) // SLOPE_MIB)


def test_finds_the_throughput_optimum_when_the_budget_allows_it():
    calls: list[int] = []
    result = search(lambda b: synthetic(b, calls), budget_mib=100.0, max_batch=512)
    assert result.pick.batch == OPTIMUM
    # the bracket closes on the exact largest fitting batch, 196
    assert result.max_fitting_batch == largest_fitting(100.0) == 196
    assert result.first_too_large == 197
    assert result.budget_binding
    assert [p.batch for p in result.points] == calls  # every point tried is recorded
    assert calls[:9] == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert len(calls) <= 9 + 3 * 7  # doubling, then at most 3 log2(bracket) probes


def test_a_budget_that_forbids_the_optimum_picks_the_largest_fitting_batch():
    result = search(synthetic, budget_mib=20.0, max_batch=512)
    assert largest_fitting(20.0) == 36 < OPTIMUM
    assert result.pick.batch == 36
    assert result.pick.peak_mib <= 20.0
    assert all(p.peak_mib > 20.0 for p in result.points if p.batch > 36)


def test_the_linear_model_closes_an_exact_bracket_in_two_probes():
    calls: list[int] = []
    search(lambda b: synthetic(b, calls), budget_mib=20.0, max_batch=512)
    # doubling to 64 (does not fit), then the model: 36 fits, 37 does not
    assert calls == [1, 2, 4, 8, 16, 32, 64, 36, 37]


def test_a_wrong_model_still_converges():
    def step_memory(batch: int) -> Point:  # memory jumps: far from linear
        return Point(batch, float(batch), 1.0 if batch <= 45 else 100.0)

    result = search(step_memory, budget_mib=50.0, max_batch=256)
    assert result.max_fitting_batch == 45 and result.pick.batch == 45
    assert len(result.points) <= 7 + 3 * 5


def test_budget_not_binding_up_to_max_batch():
    result = search(synthetic, budget_mib=1e6, max_batch=100)
    assert [p.batch for p in result.points] == [1, 2, 4, 8, 16, 32, 64, 100]
    assert not result.budget_binding
    assert result.pick.batch == OPTIMUM


def test_out_of_memory_counts_as_not_fitting():
    def oom_above_10(batch: int) -> Point:
        if batch > 10:
            return Point(batch, None, None, status="oom")
        return Point(batch, float(batch), float(batch))

    result = search(oom_above_10, budget_mib=1e6, max_batch=64)
    assert result.max_fitting_batch == 10 and result.pick.batch == 10


def test_a_budget_too_small_for_batch_1_is_one_clear_line():
    with pytest.raises(NothingFits) as error:
        search(synthetic, budget_mib=2.2, max_batch=64)
    message = str(error.value)
    assert "budget_mib=2.2" in message and "batch 1" in message and "2.50 MiB" in message
    assert "\n" not in message
    assert [p.batch for p in error.value.search.points] == [1]


def test_bad_budget_is_a_user_error():
    with pytest.raises(UserError, match="budget_mib"):
        search(synthetic, budget_mib=0.0, max_batch=8)


def test_linear_fit_recovers_the_model_and_its_r2():
    fit = linear_fit([synthetic(b) for b in (1, 2, 8, 32)])
    assert fit["intercept_mib"] == pytest.approx(INTERCEPT_MIB)
    assert fit["slope_mib_per_batch"] == pytest.approx(SLOPE_MIB)
    assert fit["r2"] == pytest.approx(1.0)
    bent = linear_fit([Point(b, 1.0, float(b * b)) for b in (1, 2, 4, 8, 16)])
    assert bent["r2"] < 0.95
    assert linear_fit([synthetic(4)]) is None


def test_summary_and_series_describe_every_point():
    result = search(synthetic, budget_mib=20.0, max_batch=512)
    metrics = autobatch.summary(result)
    assert metrics["pick_batch"] == 36 and metrics["max_fitting_batch"] == 36
    assert metrics["fit"]["predicted_max_batch"] == 36
    assert metrics["pick_over_batch1_tokens_per_s"] == pytest.approx(
        synthetic(36).tokens_per_s / synthetic(1).tokens_per_s
    )
    rows = autobatch.series(result)
    assert rows["batch"] == [p.batch for p in result.points]
    assert rows["fits"] == [p.peak_mib <= 20.0 for p in result.points]


def each(timing):
    """A round function (autobatch.confirm's time_round) from one of a batch's timing."""
    return lambda batches: [timing(batch) for batch in batches]


def test_confirmation_rounds_overrule_one_slow_timing():
    """A slow spell on the largest fitting batch's one timing made the search pick another
    (run AM: B=108 at 251,617 tokens/s, B=64 289,623, B=109 318,343); the interleaved rounds
    time both again and pick the faster, and the record keeps every round."""

    def spelled(batch):  # B=36's one timing at half its rate
        point = synthetic(batch)
        slowed = 0.5 if batch == 36 else 1.0
        return Point(batch, slowed * point.tokens_per_s, point.peak_mib)

    result = search(spelled, budget_mib=20.0, max_batch=512)
    assert result.pick.batch == 32 and result.max_fitting_batch == 36
    timed: list[int] = []

    def again(batch):
        timed.append(batch)
        return Timing(batch, synthetic(batch).tokens_per_s, 1.0)

    autobatch.confirm(result, each(again), rounds=3)
    assert timed == [32, 36, 36, 32, 32, 36]  # interleaved, the order alternating
    assert result.pick.batch == 36
    assert result.pick.tokens_per_s == pytest.approx(synthetic(36).tokens_per_s)
    assert result.pick.peak_mib == synthetic(36).peak_mib
    assert autobatch.summary(result)["confirm_rounds"] == 3
    rows = autobatch.series(result)
    assert rows["confirm_batch"] == timed
    assert rows["confirm_tokens_per_s"] == [synthetic(b).tokens_per_s for b in timed]
    assert rows["confirm_probe_ms"] == [1.0] * 6


def test_rounds_in_a_slow_spell_are_replaced_and_left_out():
    """A round whose probe reads 1.5x the median (a slow spell: spells.SLOW_PROBE 1.25) does
    not count: another round replaces it, and the pick ignores it however it timed."""
    result = search(synthetic, budget_mib=20.0, max_batch=512)
    probes = iter([1.0, 1.0, 1.5, 1.0, 1.0, 1.0, 1.0, 1.0])

    def again(batch):  # B=36 the faster, but in the spelled round B=32 times 100x faster
        spelled = next(probes)
        rate = synthetic(batch).tokens_per_s * (100.0 if spelled > 1 and batch == 32 else 1.0)
        return Timing(batch, rate, spelled)

    autobatch.confirm(result, each(again), rounds=3)
    assert len(result.rounds) == 8  # three rounds, one in a spell: a fourth replaces it
    assert autobatch.clean_rounds(result.rounds) == [True, False, True, True]
    assert result.pick.batch == 36
    assert autobatch.summary(result)["confirm_clean_rounds"] == 3
    assert autobatch.series(result)["confirm_kept"] == [True, True, False, False] + [True] * 4
    # judged against the run's reference probe where the spell log gave one: at 1.0 ms, a
    # job whose probes all read 1.5 ms ran in a spell however alike they are
    spelled_job = search(synthetic, budget_mib=20.0, max_batch=512)
    autobatch.confirm(spelled_job, each(lambda b: Timing(b, 1.0, 1.5, 1.0)), rounds=2)
    assert len(spelled_job.rounds) == 8 and not any(autobatch.clean_rounds(spelled_job.rounds))
    assert autobatch.summary(spelled_job)["confirm_probe_reference_ms"] == 1.0
    # at most `rounds` more, however many spells
    spelled_all = search(synthetic, budget_mib=20.0, max_batch=512)
    probes = iter([1.0, 2.0] * 20)
    autobatch.confirm(spelled_all, each(lambda b: Timing(b, 1.0, next(probes))), rounds=3)
    assert len(spelled_all.rounds) == 12 and not any(autobatch.clean_rounds(spelled_all.rounds))
    assert autobatch.kept(spelled_all.rounds) == [True] * 12  # too few clean: all of them


@pytest.mark.parametrize(
    ("clean", "kept_timings"), [(2, [True] * 20), (5, [True] * 10 + [False] * 10)]
)
def test_a_job_mostly_in_a_spell_keeps_every_round(clean, kept_timings):
    """Ten rounds, the first `clean` at the normal probe: two clean rounds of ten are no better
    a sample than the rest (a paired interval on one degree of freedom), so all are kept;
    five of ten are half: those alone."""
    probes = [1.0 if k < 2 * clean else 2.0 for k in range(20)]
    timings = [Timing(b, 1.0, p) for b, p in zip([32, 36] * 10, probes, strict=True)]
    assert sum(autobatch.clean_rounds(timings)) == clean
    assert autobatch.kept(timings) == kept_timings


def test_nothing_to_confirm_with_one_fitting_point():
    result = search(lambda b: Point(b, 1.0, float(b)), budget_mib=1.5, max_batch=8)
    assert [p.batch for p in result.points if p.fits(1.5)] == [1]
    autobatch.confirm(result, lambda batch: pytest.fail("timed"), rounds=3)
    assert result.pick.batch == 1 and result.rounds == []
    assert "confirm_batch" not in autobatch.series(result)


TINY = ["--variant", "numpy-lstm-fused", "--dtype", "float64", "--seq-len", "3",
        "--input-size", "2", "--hidden-size", "4", "--threads", "1", "--min-time-s", "0.01",
        "--min-calls", "3"]  # fmt: skip


def test_autobatch_command_writes_a_record(tmp_path, monkeypatch):
    """The command on a fake heap instrument (peak = 1 + 0.25 B MiB): the pick and the record."""
    from rnnopt.experiments import autobatch as protocol

    def fake_peak(variant_name, dtype, device, shape, phase, seed=0):
        return {"peak_mib": 1.0 + 0.25 * shape.batch, "instrument": "fake"}

    monkeypatch.setattr(protocol, "step_peak", fake_peak)  # the Measurer's instrument
    # a steady speed probe: a slow spell of the host while the test runs would otherwise add
    # rounds (make test met one: probes of 1.02 then 1.37 ms, four rounds instead of two)
    monkeypatch.setattr(protocol, "speed_probe_ms", lambda: 1.0)
    out = tmp_path / "autobatch.json"
    assert (
        main(
            [
                "autobatch",
                *TINY,
                "--budget-mib",
                "5",
                "--max-batch",
                "64",
                "--out",
                str(out),
                "--confirm-rounds",
                "2",
            ]
        )
        == 0  # fmt: skip
    )
    record = read_record(out)
    assert record["kind"] == "autobatch" and record["status"] == "ok"
    metrics = record["metrics"]
    assert metrics["max_fitting_batch"] == 16 and metrics["first_too_large_batch"] == 17
    assert metrics["pick_peak_mib"] <= 5
    assert metrics["fit"]["slope_mib_per_batch"] == pytest.approx(0.25)
    assert record["series"]["batch"][:5] == [1, 2, 4, 8, 16]
    assert all(t > 0 for t in record["series"]["tokens_per_s"])
    assert record["shape"]["batch"] == metrics["pick_batch"]
    # two rounds of the largest fitting batch and the fastest other, interleaved
    confirmed = record["series"]["confirm_batch"]
    assert len(confirmed) == 4 and confirmed.count(16) == 2 and len(set(confirmed)) == 2
    assert metrics["pick_batch"] in confirmed and metrics["confirm_rounds"] == 2


def test_autobatch_command_waits_out_a_spell_before_a_round_and_logs_it(tmp_path, monkeypatch):
    """With --spell-log, each confirmation round starts after the run's spell gate: the first
    finds the host in a spell (3 ms against the log's 1 ms) and waits; the rounds are judged
    against the log's reference, and the job logs its line (fastest probe, seconds waited)."""
    import time

    from rnnopt.experiments import autobatch as protocol
    from rnnopt.measure import spells

    monkeypatch.setattr(
        protocol,
        "step_peak",
        lambda *a, **k: {"peak_mib": 1.0 + 0.25 * a[3].batch, "instrument": "f"},
    )
    gate_probes = [3.0, 3.0, 1.0]
    monkeypatch.setattr(
        spells, "speed_probe_ms", lambda: gate_probes.pop(0) if gate_probes else 1.0
    )
    monkeypatch.setattr(spells, "POLL_S", 0.0)
    monkeypatch.setattr(protocol, "speed_probe_ms", lambda: 1.1)
    log = tmp_path / "spells.log"
    log.write_text("".join(f"1.0 0.0 {time.time()}\n" for _ in range(5)))
    out = tmp_path / "autobatch.json"
    argv = ["autobatch", *TINY, "--budget-mib", "5", "--max-batch", "64", "--out", str(out),
            "--confirm-rounds", "2", "--spell-log", str(log)]  # fmt: skip
    assert main(argv) == 0
    record = read_record(out)
    assert record["metrics"]["confirm_probe_reference_ms"] == 1.0
    assert record["metrics"]["confirm_clean_rounds"] == 2
    assert record["series"]["confirm_probe_ms"] == [1.1] * 4  # the slower of before and after
    assert gate_probes == []  # the gate probed through the spell: 3.0, 3.0, then 1.0
    assert len(log.read_text().splitlines()) == 6  # the job's line: its fastest probe
    assert float(log.read_text().splitlines()[-1].split()[0]) == 1.0


def test_autobatch_command_budget_too_small(tmp_path, monkeypatch, capsys):
    from rnnopt.experiments import autobatch as protocol

    monkeypatch.setattr(
        protocol, "step_peak", lambda *args, **kwargs: {"peak_mib": 3.0, "instrument": "fake"}
    )
    out = tmp_path / "autobatch.json"
    assert (
        main(["autobatch", *TINY, "--budget-mib", "1", "--max-batch", "8", "--out", str(out)]) == 0
    )
    record = json.loads(out.read_text())
    assert record["status"] == "skipped"
    assert (
        record["reason"]
        == "budget_mib=1 is too small: batch 1 already peaks at 3.00 MiB; no batch size fits"
    )
    assert record["reason"] in capsys.readouterr().out
    assert record["series"]["batch"] == [1]


def test_autobatch_command_with_the_heap_instrument(tmp_path):
    out = tmp_path / "autobatch.json"
    argv = ["autobatch", *TINY, "--budget-mib", "0.05", "--max-batch", "64", "--out", str(out)]
    assert main(argv) == 0
    record = read_record(out)
    assert record["status"] == "ok", record["reason"]
    points = record["series"]
    assert all(peak > 0 for peak in points["peak_mib"])
    assert points["fits"] == [peak <= 0.05 for peak in points["peak_mib"]]
    assert record["metrics"]["pick_peak_mib"] <= 0.05
    assert any("memray" in note for note in record["notes"])
