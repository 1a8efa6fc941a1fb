"""Process counters accumulated over chosen stretches of a measurement: rusage and gc.

`ProcessCounters` is switched on around each measured call only (never around untimed
preparation such as the forward before a timed backward), and sums what happened there:
minor / major page faults and user / system CPU time from `resource.getrusage`, and garbage
collections per generation with their total pause from `gc.callbacks`.
"""

from __future__ import annotations

import gc
import resource
import time


class GcMonitor:
    """Counts collections per generation and their pause while `active`."""

    def __init__(self) -> None:
        self.active = False
        self.collections = [0, 0, 0]
        self.pause_ns = 0
        self._started_ns: int | None = None

    def __enter__(self) -> GcMonitor:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc) -> None:
        gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if not self.active:
            return
        if phase == "start":
            self._started_ns = time.perf_counter_ns()
        elif self._started_ns is not None:
            self.pause_ns += time.perf_counter_ns() - self._started_ns
            self.collections[info["generation"]] += 1
            self._started_ns = None

    def metrics(self) -> dict:
        return {
            "gen0": self.collections[0],
            "gen1": self.collections[1],
            "gen2": self.collections[2],
            "pause_ms": self.pause_ns / 1e6,
        }


class ProcessCounters:
    """rusage and gc sums over the stretches between `start()` and `stop()`.

    Use as a context manager for the whole measurement (it registers the gc callback), and
    start/stop around each measured call.
    """

    def __init__(self) -> None:
        self.gc = GcMonitor()
        self.minor_faults = 0
        self.major_faults = 0
        self.user_s = 0.0
        self.system_s = 0.0
        self._before: resource.struct_rusage | None = None

    def __enter__(self) -> ProcessCounters:
        self.gc.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.gc.__exit__(*exc)

    def start(self) -> None:
        self._before = resource.getrusage(resource.RUSAGE_SELF)
        self.gc.active = True

    def stop(self) -> None:
        after = resource.getrusage(resource.RUSAGE_SELF)
        self.gc.active = False
        before = self._before
        self.minor_faults += after.ru_minflt - before.ru_minflt
        self.major_faults += after.ru_majflt - before.ru_majflt
        self.user_s += after.ru_utime - before.ru_utime
        self.system_s += after.ru_stime - before.ru_stime

    def per_call(self, calls: int) -> dict:
        """Averages per measured call: faults, CPU milliseconds (all threads of the process)."""
        return {
            "minor_faults": self.minor_faults / calls,
            "major_faults": self.major_faults / calls,
            "user_cpu_ms": 1e3 * self.user_s / calls,
            "sys_cpu_ms": 1e3 * self.system_s / calls,
        }


def maxrss_mib() -> float:
    """High-water mark of this process's resident set (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
