"""`python -m rnnopt <command>`: one module per subcommand under rnnopt.cli."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

from rnnopt.cli.common import Parser
from rnnopt.cli.isolate import ISOLABLE, run_isolated
from rnnopt.errors import UserError

COMMANDS = (
    "data",
    "verify",
    "train",
    "profile",
    "topup",
    "memory",
    "peak",
    "timer-check",
    "churn",
    "precision",
    "autobatch",
    "varlen",
    "env",
    "aggregate",
    "report",
    "compare",
    "rerun-spread",
    "export-pyperf",
    "check-config",
)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="rnnopt",
        description="Measure how RNN/LSTM implementations spend time and memory.",
    )
    parser.add_argument(
        "--isolate",
        action="store_true",
        help="run the measurement in a child process and record it as oom/failed if the kernel "
        f"kills it (commands: {', '.join(ISOLABLE)}; the workflow uses it)",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"rnnopt.cli.{name.replace('-', '_')}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--isolate"] and argv[1:2] and argv[1] in ISOLABLE:
        # The child parses and checks the flags; the parser is built here only to write the
        # records of a killed child (a timing job waits for this process to start).
        return run_isolated(argv[1:], lambda: build_parser().parse_args(argv))
    args = build_parser().parse_args(argv)
    try:
        check_output_folder(getattr(args, "out", None))
        if args.isolate:
            raise UserError(f"--isolate: not for {args.command} (only {', '.join(ISOLABLE)})")
        status = args.func(args) or 0
        sys.stdout.flush()  # a closed pipe raises here, inside the handler below
        return status
    except UserError as error:
        print(f"rnnopt {args.command}: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader closed the pipe (`rnnopt compare A B | head -1`): stop as a Unix filter
        # does, without a traceback, and without another at exit, when Python flushes stdout.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def check_output_folder(out: str | None) -> None:
    """--out can be written, before any measurement (an unwritable --out was found after the
    whole measurement, with a traceback): its nearest existing folder is a folder we may
    write in. Nothing is created here: a command that refuses its flags writes nothing."""
    if not out:
        return
    existing = Path(out).absolute().parent
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"--out {out}: cannot write there ({existing} is not a writable folder)")
