"""How much a timing loop had to share the machine, measured around the whole loop.

    with Contention() as contention:
        ...  # the timed calls
    record_metrics["contention"] = contention.metrics()

What each number tells a reader:
- `loadavg_1m`: the kernel's one-minute load average when the block starts (runnable
  processes, this one included): above the cores the timing asked for, something else wanted
  the CPU.
- `steal_fraction`: the share of the machine's CPU time the hypervisor gave to other guests
  during the block (steal / all jiffies of /proc/stat's `cpu` line); on a VM, time that a
  timer counts but the process never ran. None where /proc/stat is unreadable.
- `involuntary_ctx_switches`: times the OS took the CPU away from this process during the
  block (its time slice ended while it was runnable): a direct measure of contention, each one
  a pause that a timed call may have counted.
- `voluntary_ctx_switches`: times the process gave the CPU up itself (waiting on I/O, a lock,
  a sleeping thread pool); high with threaded BLAS, not a sign of contention by itself.
- `wall_s`: the block's duration, the scale for the counts above.
- `probe_before_ms`, `probe_after_ms`: the time of a fixed pure-Python workload (the fastest
  of a few runs) just before and after the block. None of the counters above saw the slow
  spells of these VMs (steal 0, load normal, one process of a job 1.5-2x slower than its
  siblings for a minute): the probe does, and the report leaves out a process whose probe
  ran well above the run's usual (rnnopt.report.wide.DISTURBED_PROBE).
- `spell_wait_s`, `probe_reference_ms` (with a spell gate, rnnopt.measure.spells): the seconds
  the process waited, probing, for a slow spell to pass before its loop, and the run's usual
  probe it compared against (None until the run has one).
"""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path

PROC_STAT = Path("/proc/stat")
# user nice system idle iowait irq softirq steal; guest and guest_nice are already counted in
# user and nice, so they stay out of the total.
STAT_FIELDS = 8
STEAL = 7


def cpu_jiffies(stat: str) -> list[int] | None:
    """The eight counters of /proc/stat's aggregate `cpu` line; None when it has none."""
    for line in stat.splitlines():
        fields = line.split()
        if fields[:1] == ["cpu"] and len(fields) > STAT_FIELDS:
            return [int(v) for v in fields[1 : STAT_FIELDS + 1]]
    return None


def steal_fraction(before: str | None, after: str | None) -> float | None:
    """Stolen jiffies / all jiffies between two readings of /proc/stat; None when unknown."""
    start = cpu_jiffies(before) if before else None
    end = cpu_jiffies(after) if after else None
    if start is None or end is None:
        return None
    total = sum(end) - sum(start)
    return (end[STEAL] - start[STEAL]) / total if total > 0 else 0.0


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _load_1m() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


PROBE_LOOPS = 20_000  # about 1 ms of interpreter work on a 2.4 GHz Zen 3
PROBE_RUNS = 5


def _probe_work(loops: int) -> int:
    total = 0
    for i in range(loops):
        total += i * i % 7
    return total


def speed_probe_ms(loops: int = PROBE_LOOPS, runs: int = PROBE_RUNS) -> float:
    """The fastest of `runs` runs of a fixed pure-Python loop, ms: how fast this CPU runs
    interpreter-bound code right now (a momentary interruption does not count; a slow spell
    does)."""
    times = []
    for _ in range(runs):
        start = time.perf_counter_ns()
        _probe_work(loops)
        times.append(time.perf_counter_ns() - start)
    return min(times) / 1e6


class Contention:
    """A context manager around one process's whole timing loop; `.metrics()` after it. With a
    `gate` (rnnopt.measure.spells.SpellGate) the loop first waits out a slow spell, and the
    process's probes go to the run's spell log."""

    def __init__(self, proc_stat: str | os.PathLike = PROC_STAT, gate=None):
        self.proc_stat = Path(proc_stat)
        self.gate = gate
        self._waited_s, self._reference = 0.0, None

    def __enter__(self) -> Contention:
        if self.gate is None:
            self._probe_before = speed_probe_ms()
        else:
            self._probe_before, self._waited_s, self._reference = self.gate.wait()
        self._load_1m = _load_1m()
        self._stat = _read(self.proc_stat)
        self._usage = resource.getrusage(resource.RUSAGE_SELF)
        self._start_s = time.perf_counter()
        return self

    def __exit__(self, *exc_info) -> None:
        self._wall_s = time.perf_counter() - self._start_s
        usage = resource.getrusage(resource.RUSAGE_SELF)
        self._involuntary = usage.ru_nivcsw - self._usage.ru_nivcsw
        self._voluntary = usage.ru_nvcsw - self._usage.ru_nvcsw
        self._steal = steal_fraction(self._stat, _read(self.proc_stat))
        self._probe_after = speed_probe_ms()
        if self.gate is not None and exc_info[0] is None:
            self.gate.record(min(self._probe_before, self._probe_after), self._waited_s)

    def metrics(self) -> dict:
        """loadavg_1m, steal_fraction, involuntary_ctx_switches, voluntary_ctx_switches, wall_s
        and the speed probe around the block (the module's docstring says what each tells)."""
        return {
            "loadavg_1m": self._load_1m,
            "steal_fraction": self._steal,
            "involuntary_ctx_switches": self._involuntary,
            "voluntary_ctx_switches": self._voluntary,
            "wall_s": self._wall_s,
            "probe_before_ms": self._probe_before,
            "probe_after_ms": self._probe_after,
            **(
                {"spell_wait_s": self._waited_s, "probe_reference_ms": self._reference}
                if self.gate is not None
                else {}
            ),
        }
