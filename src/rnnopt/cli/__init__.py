"""`python -m rnnopt <command>`: one module per subcommand under rnnopt.cli."""

from __future__ import annotations

import argparse
import importlib
import sys

from rnnopt.errors import UserError

COMMANDS = (
    "data",
    "verify",
    "train",
    "profile",
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
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rnnopt",
        description="Measure how RNN/LSTM implementations spend time and memory.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"rnnopt.cli.{name.replace('-', '_')}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args) or 0
    except UserError as error:
        print(f"rnnopt {args.command}: error: {error}", file=sys.stderr)
        return 2
