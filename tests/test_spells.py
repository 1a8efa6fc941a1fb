"""rnnopt.measure.spells: a timing process waits out a slow spell of the host, judged against
the run's own probes, within its own and the run's limits, and logs its probe."""

import time

import pytest

from rnnopt.measure import spells
from rnnopt.measure.contention import Contention
from rnnopt.measure.spells import SpellGate


@pytest.fixture
def probes(monkeypatch):
    """The speed probe reads the values put in the list, in turn (the last one ever after)."""
    readings = []

    def probe():
        return readings.pop(0) if len(readings) > 1 else readings[0]

    monkeypatch.setattr(spells, "speed_probe_ms", probe)
    monkeypatch.setattr(spells, "POLL_S", 0.0)
    return readings


def write_log(path, lines, logged=None):
    logged = time.time() if logged is None else logged
    path.write_text("".join(f"{probe} {waited} {logged}\n" for probe, waited in lines))


def test_no_waiting_before_the_run_has_a_reference(tmp_path, probes):
    log = tmp_path / "spells.log"
    write_log(log, [(1.0, 0.0)] * (spells.MIN_REFERENCE - 1))
    probes.extend([3.0, 1.0])
    assert SpellGate(log, 5, 40).wait() == (3.0, 0.0, None)


def test_a_process_in_a_spell_waits_until_the_probe_is_normal(tmp_path, probes):
    log = tmp_path / "spells.log"
    write_log(log, [(1.0, 0.0)] * 4 + [(3.0, 0.0)] * 3)  # the median, not the mean: 1.0
    probes.extend([1.3, 1.4, 1.24, 3.0])
    probe, waited, reference = SpellGate(log, 5, 40).wait()
    assert (probe, reference) == (1.24, 1.0)  # 1.3 and 1.4 are above 1.25 x 1.0
    assert 0 < waited < 5


def test_a_normal_probe_does_not_wait(tmp_path, probes):
    log = tmp_path / "spells.log"
    write_log(log, [(1.0, 0.0)] * 5)
    probes.extend([1.25, 3.0])
    assert SpellGate(log, 5, 40).wait() == (1.25, 0.0, 1.0)


def test_the_wait_ends_at_the_process_limit(tmp_path, probes):
    log = tmp_path / "spells.log"
    write_log(log, [(1.0, 0.0)] * 5)
    probes.append(2.0)
    probe, waited, _ = SpellGate(log, 0.05, 40).wait()
    assert probe == 2.0 and 0.05 <= waited < 1.0


def test_the_wait_ends_at_the_budget_of_the_last_ten_minutes(tmp_path, probes):
    log = tmp_path / "spells.log"
    probes.append(2.0)
    write_log(log, [(1.0, 0.0)] * 5 + [(1.0, 20.0)] * 2)  # 40 s spent: nothing left
    assert SpellGate(log, 5, 40).wait() == (2.0, 0.0, 1.0)
    write_log(log, [(1.0, 20.0)] * 2 + [(1.0, 0.0)] * 5, logged=time.time() - 601)
    with log.open("a") as text:
        text.write(f"1.0 39.98 {time.time()}\n")  # older waits do not count; this one does
    probe, waited, _ = SpellGate(log, 5, 40).wait()
    assert probe == 2.0 and 0.02 <= waited < 1.0


def test_a_line_cut_short_is_left_out_and_a_process_logs_its_faster_probe(tmp_path, probes):
    log = tmp_path / "spells.log"
    write_log(log, [(1.0, 0.0)] * 4)
    with log.open("a") as text:
        text.write("1.0 0.0")  # a process killed while writing
    probes.extend([1.1, 0.9])
    gate = SpellGate(log, 5, 40)
    assert gate.wait()[2] is None  # four whole lines: no reference yet
    with Contention(tmp_path / "missing", gate=gate) as contention:
        pass
    metrics = contention.metrics()
    assert (metrics["spell_wait_s"], metrics["probe_reference_ms"]) == (0.0, None)
    assert log.read_text().splitlines()[-1].split()[:2] == ["0.900000", "0.000"]
    assert gate.wait()[2] == 1.0  # five whole lines now


def test_a_process_waits_out_the_spells_the_report_leaves_out():
    from rnnopt.report.wide import DISTURBED_PROBE

    assert spells.SLOW_PROBE == DISTURBED_PROBE


def test_a_failed_timing_loop_logs_nothing(tmp_path, probes):
    log = tmp_path / "spells.log"
    probes.append(1.0)
    with pytest.raises(RuntimeError), Contention(tmp_path / "missing", gate=SpellGate(log, 5, 40)):
        raise RuntimeError("the variant failed")
    assert not log.exists()
