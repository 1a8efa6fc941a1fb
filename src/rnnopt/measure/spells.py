"""Waiting out a slow spell of the host before a timing loop starts.

The VMs this pipeline runs on have slow spells: for a few seconds (now and then a minute)
interpreter-bound code runs 1.4-1.7x slower while steal time stays 0 (docs/intervals.md,
"Slow spells"). The report leaves out a process whose speed probe
(rnnopt.measure.contention.speed_probe_ms) read high, and the top-up times another in its
place, but one spell often takes a process of several jobs, and a run in a spell-heavy hour
lost more of them than the top-up's budget could give back. Most spells are short, so a
process that finds the host in one waits, probing, until the probe reads normal again, within
`wait_s` a process and `budget_s` in any BUDGET_WINDOW_S (a default run takes about ten
minutes: a spell-heavy hour costs it budget_s, not more).

"Normal" is relative to the run's own probes, like the report's rule: each timing process
appends the faster of its two probes, the seconds it waited and the time to the run's spell
log, one line each, and the reference is the median of the logged probes once MIN_REFERENCE
processes have logged one. Timing jobs never run side by side, so the log has one writer at a
time.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from rnnopt.measure.contention import speed_probe_ms

# A probe this much above the run's median probe: the host is in a slow spell (the report's
# rule, rnnopt.report.wide.DISTURBED_PROBE, uses the same factor).
SLOW_PROBE = 1.25
MIN_REFERENCE = 5  # logged processes before a reference exists (no waiting before)
POLL_S = 0.25  # seconds between probes while waiting
BUDGET_WINDOW_S = 600.0


Line = tuple[float, float, float]  # probe ms, seconds waited, time.time() when logged


def _reference(lines: list[Line]) -> float | None:
    """The median of the logged probes; None before MIN_REFERENCE processes logged one."""
    probes = [probe for probe, _, _ in lines]
    return statistics.median(probes) if len(probes) >= MIN_REFERENCE else None


def normal_probes(probes: list[float], reference: float | None = None) -> list[bool]:
    """Which of one job's probes read the host at its normal speed: at most SLOW_PROBE x the
    run's reference probe (SpellGate.wait's), or without one the fastest of these probes (a
    job in a spell for half its probes has its median in the spell: seen here, probes of
    1.07-1.13 ms and 1.44-1.52 ms in one autobatch job)."""
    if not probes:
        return []
    normal = reference if reference else min(probes)
    return [probe <= SLOW_PROBE * normal for probe in probes]


class SpellGate:
    """The wait before one process's timing loop, and its line in the run's spell log."""

    def __init__(self, log: str | Path, wait_s: float, budget_s: float):
        self.log = Path(log)
        self.wait_s = wait_s
        self.budget_s = budget_s

    def _lines(self) -> list[Line]:
        try:
            text = self.log.read_text()
        except FileNotFoundError:
            return []
        lines = []
        for line in text.splitlines():
            fields = line.split()
            if len(fields) == 3:  # a line cut short by a killed process is left out
                lines.append((float(fields[0]), float(fields[1]), float(fields[2])))
        return lines

    def wait(self) -> tuple[float, float, float | None]:
        """(the probe the timing loop starts after, seconds waited, the reference): probes
        until one reads at most SLOW_PROBE x the reference, or this process's wait_s or the
        budget_s of the last BUDGET_WINDOW_S is spent (the loop then starts in the spell, and
        the report judges it as before)."""
        lines = self._lines()
        reference = _reference(lines)
        probe = speed_probe_ms()
        if reference is None or probe <= SLOW_PROBE * reference:
            return probe, 0.0, reference
        since = time.time() - BUDGET_WINDOW_S
        spent = sum(waited for _, waited, logged in lines if logged >= since)
        allowed = min(self.wait_s, self.budget_s - spent)
        if allowed <= 0:
            return probe, 0.0, reference
        start = time.perf_counter()
        while probe > SLOW_PROBE * reference and time.perf_counter() - start < allowed:
            time.sleep(POLL_S)
            probe = speed_probe_ms()
        return probe, time.perf_counter() - start, reference

    def record(self, probe_ms: float, waited_s: float) -> None:
        """Appends this process's line: the faster of its probes, the seconds it waited, now."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        # After a line a killed process cut short, on a line of its own.
        text = self.log.read_bytes() if self.log.exists() else b""
        cut = bool(text) and not text.endswith(b"\n")
        with self.log.open("a") as log:
            log.write(("\n" if cut else "") + f"{probe_ms:.6f} {waited_s:.3f} {time.time():.3f}\n")
