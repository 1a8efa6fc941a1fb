"""What the per-variant measurements share: inputs, the runner, failures of the variant.

A measurement must not stop the pipeline because the variant under test cannot run: every
call into the variant goes through `guarded`, which turns its exceptions into `VariantFailed`;
the command then writes a record with status oom / skipped / failed and a one-line reason and
exits 0 (rnnopt.cli.common.write_failure). Errors of the harness itself are not caught and
end the process with a traceback.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

from rnnopt.errors import UnavailableError
from rnnopt.models.flops import Shape, memory_model, param_count
from rnnopt.models.params import init_params
from rnnopt.models.variants import get_variant, gpu_device_files
from rnnopt.records import one_line


class VariantFailed(Exception):
    """The variant under test raised `error`; recorded, not propagated."""

    def __init__(self, error: BaseException):
        super().__init__(one_line(error))
        self.error = error


def guarded(function: Callable, *args, **kwargs):
    """Run variant code; its exceptions (MemoryError included) become VariantFailed."""
    try:
        return function(*args, **kwargs)
    except (Exception, MemoryError) as error:
        raise VariantFailed(error) from error


def shape_of(args) -> Shape:
    return Shape(args.batch, args.seq_len, args.input_size, args.hidden_size)


def make_inputs(cell: str, shape: Shape, seed: int):
    """Float64 params, x (B, T, I) and grad_y (B, T, H) from `seed`: the same for all variants."""
    params = init_params(cell, shape.input_size, shape.hidden_size, seed)
    rng = np.random.default_rng(seed + 1)
    x = rng.standard_normal((shape.batch, shape.seq_len, shape.input_size))
    grad_y = rng.standard_normal((shape.batch, shape.seq_len, shape.hidden_size))
    return params, x, grad_y


def bytes_needed(cell: str, shape: Shape, dtype: str) -> int:
    """What a step at `shape` needs at least: the float64 inputs every variant starts from
    (params, x, grad_y) and the analytic step at `dtype` (rnnopt.models.flops.memory_model)."""
    T, B, I, H = shape.seq_len, shape.batch, shape.input_size, shape.hidden_size
    inputs = (param_count(cell, I, H) + T * B * I + T * B * H) * 8
    model = memory_model(cell, shape, dtype, "step")
    return inputs + sum(v for k, v in model.items() if k != "minimum_bytes")


def available_bytes() -> int:
    import psutil

    return psutil.virtual_memory().available


def check_fits(cell: str, shape: Shape, dtype: str) -> None:
    """UnavailableError (a skipped record) when the shape cannot fit the host's available
    memory: a job the kernel's OOM killer ends writes no record and stopped the whole run."""
    needed, available = bytes_needed(cell, shape, dtype), available_bytes()
    if needed > available:
        raise UnavailableError(
            f"B={shape.batch} T={shape.seq_len} I={shape.input_size} H={shape.hidden_size} "
            f"{dtype} needs at least {needed / 2**30:.3g} GiB; {available / 2**30:.3g} GiB "
            "available on this host"
        )


def check_cores(threads: int) -> None:
    """UnavailableError (a skipped record) for more threads than this process may run on: an
    oversubscribed measurement is not one of that many threads (`threads: [1000]` was timed
    on 2 cores and called a 1000-thread figure)."""
    cores = len(os.sched_getaffinity(0))
    if threads > cores:
        raise UnavailableError(
            f"--threads {threads}: this process may run on {cores} cores (its CPU affinity); "
            "more threads than cores would measure oversubscription"
        )


def runner_factory(args, lr: float = 1e-3):
    """(variant, make_runner) for the flags: make_runner() builds a fresh variant instance and
    runner on the same float64 inputs (variants cache workspaces on themselves, so a fresh
    measurement needs both fresh). VariantFailed when the variant cannot be built here (an
    unsupported or unavailable combination becomes status skipped)."""
    shape = shape_of(args)
    variant = guarded(get_variant, args.variant, dtype=args.dtype, device=args.device)
    guarded(check_fits, variant.cell, shape, args.dtype)
    guarded(check_cores, args.threads)
    try:
        params, x, grad_y = make_inputs(variant.cell, shape, args.seed)
    except MemoryError as error:  # a shape too large for this host: oom, like the variant's
        raise VariantFailed(error) from error

    def make_runner():
        fresh = get_variant(args.variant, dtype=args.dtype, device=args.device)
        return fresh.runner(params, x, grad_y, lr)

    return variant, make_runner


def build_runner(args, lr: float = 1e-3):
    """(variant, runner) for the flags; VariantFailed as in `runner_factory`."""
    variant, make_runner = runner_factory(args, lr)
    return variant, guarded(make_runner)


def phase_call(runner, phase: str) -> tuple[Callable[[], None], Callable[[], None] | None]:
    """(call, prepare) of a phase: backward is timed after an untimed forward."""
    if phase == "forward":
        return runner.forward, None
    if phase == "backward":
        return runner.backward, runner.forward
    return runner.step, None


def guard_calls(*calls: Callable | None) -> list[Callable | None]:
    """Each call wrapped so that the variant's exceptions surface as VariantFailed."""
    return [None if call is None else (lambda call=call: guarded(call)) for call in calls]


def uses_torch(variant_name: str, device: str = "cpu") -> bool:
    """Whether a variant's process needs torch (and its thread pools set): not the numpy ones,
    nor a torch one asked for cuda where no GPU device exists (it is only skipped)."""
    if device == "cuda" and not gpu_device_files():
        return False
    return not variant_name.startswith("numpy-")
