"""`rnnopt --isolate COMMAND ...`: a measurement the kernel kills still leaves its record.

The kernel's out-of-memory killer ends a process with SIGKILL, which Python cannot catch: the
job would die without its record and Snakemake would stop the whole run. Isolated, the command
runs in a child process while this one waits (no CPU taken from the measurement, about 45 MiB
of its own; it parses the flags only when the child was killed). When the child dies of a
signal, this process writes the records the child owed, status `oom` (SIGKILL: the OOM
killer's signal) or `failed`, and exits 0, so the rest of the pipeline goes on. An interrupt
of the whole run (SIGINT, SIGTERM to the process group) reaches this process too and ends it
without a record: an interrupted run is resumed, not recorded.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
from collections.abc import Callable

from rnnopt.cli.common import write_measurement

# Commands that write per-variant measurement records from add_measurement_arguments' flags.
ISOLABLE = ("profile", "memory", "churn", "precision", "timer-check")


def run_isolated(argv: list[str], parse: Callable[[], argparse.Namespace]) -> int:
    """Run `rnnopt` on argv (without --isolate) in a child; its exit status, or 0 with the
    owed records written (the flags from `parse()`) when a signal killed it."""
    child = subprocess.run([sys.executable, "-m", "rnnopt", *argv], check=False)
    if child.returncode >= 0:
        return child.returncode
    args = parse()
    status, reason = killed_reason(-child.returncode)
    for one in owed_records(args):
        write_measurement(args.command, one, status=status, reason=reason, **extra_fields(args))
    print(f"rnnopt {args.command}: {status}: {reason}", file=sys.stderr)
    return 0


def killed_reason(signal_number: int) -> tuple[str, str]:
    """(status, reason) of a child killed by signal_number."""
    name = signal.Signals(signal_number).name
    if signal_number == signal.SIGKILL:
        return "oom", (
            f"killed by {name}: the kernel's out-of-memory killer, most likely (a job the "
            "kernel kills cannot say why; see dmesg)"
        )
    return "failed", f"killed by {name}"


def owed_records(args: argparse.Namespace) -> list[argparse.Namespace]:
    """The flags of each record the command would have written (profile: one per phase)."""
    if args.command != "profile":
        return [args]
    from rnnopt.cli.profile import phase_args

    return [phase_args(args, phase) for phase in dict.fromkeys(args.phase)]


def extra_fields(args: argparse.Namespace) -> dict:
    return {"process": args.process} if args.command == "profile" else {}
