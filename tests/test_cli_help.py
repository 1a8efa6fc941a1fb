"""Every flag of every command says what it is, and its default where it has one."""

import argparse

import pytest

from rnnopt.cli import build_parser


def parsers(parser=None, prefix=()):
    parser = parser or build_parser()
    yield " ".join(prefix) or "rnnopt", parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from parsers(sub, (*prefix, name))


def flags(parser):
    return [action for action in parser._actions if not isinstance(action, argparse._HelpAction)]


def test_every_flag_has_help():
    missing = [
        f"{name} {(action.option_strings or [action.dest])[0]}"
        for name, parser in parsers()
        for action in flags(parser)
        if not action.help and not isinstance(action, argparse._SubParsersAction)
    ]
    assert missing == []


@pytest.mark.parametrize(
    ("command", "says"),
    [
        ("profile", "timed seconds, at least (default: 1.0)"),
        ("profile", "seed of the float64 weights and inputs (default: 0)"),
        ("varlen", "optimizer of the steps (default: adam)"),
        ("memory", "calls after the first (default: 3)"),
    ],
)
def test_help_shows_defaults(command, says, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args([command, "--help"])
    assert says in " ".join(capsys.readouterr().out.split())


def test_a_reader_that_closes_the_pipe_gets_no_traceback():
    """`rnnopt compare A B | head -1`: head exits after one line; the rest of the output
    meets a closed pipe, which ends the command quietly (exit 1), as a Unix filter does."""
    import os
    import subprocess
    import sys

    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the command writes a byte
    try:
        done = subprocess.run(
            [sys.executable, "-m", "rnnopt", "env"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr
