"""Helpers for the measurement tests: run the CLI in-process without leaking thread limits."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal

import pytest
import torch
from threadpoolctl import threadpool_limits

from rnnopt.cli import main
from rnnopt.measure.threads import THREAD_ENV_VARS

TINY = ["--batch", "2", "--seq-len", "3", "--input-size", "4", "--hidden-size", "5"]
QUICK = ["--min-time-s", "0.01", "--min-calls", "3", "--max-warmup-calls", "3"]


@contextlib.contextmanager
def kept_threads():
    """Undo what a measurement command sets: torch threads, BLAS/OpenMP limits, thread env."""
    torch_threads = torch.get_num_threads()
    limiter = threadpool_limits(limits=None)  # changes nothing, remembers the originals
    env = {name: os.environ.get(name) for name in THREAD_ENV_VARS}
    try:
        yield
    finally:
        limiter.restore_original_limits()
        torch.set_num_threads(torch_threads)
        for name, value in env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def run_cli(*argv: str) -> int:
    with kept_threads():
        return main(list(argv))


def require_variant(name: str) -> None:
    """Skip, naming the variant, while its module has not been written yet."""
    framework, _, kind = name.split("-", 2)
    if importlib.util.find_spec(f"rnnopt.models.variants.{framework}_{kind}") is None:
        pytest.skip(
            f"variant {name} does not exist yet (no rnnopt.models.variants.{framework}_{kind})"
        )


def default_sigint() -> None:
    """preexec_fn of a child that a test interrupts with Ctrl-C: SIGINT back to its default.

    A process started in the background by a non-interactive shell (a CI runner, `nohup ... &`)
    inherits SIGINT ignored, and Python then never turns Ctrl-C into KeyboardInterrupt: the
    interrupted run would go on to the end."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
