"""What profile, memory and timer-check share: flags, inputs, the runner, failure statuses.

A measurement must not stop the pipeline because the variant under test cannot run: every
call into the variant goes through `guarded`, which turns its exceptions into `VariantFailed`;
the command then writes a record with status oom / skipped / failed and a one-line reason and
exits 0. Errors of the harness itself are not caught and end the process with a traceback.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable

import numpy as np

from rnnopt.errors import UserError
from rnnopt.measure.threads import apply_threads
from rnnopt.models.flops import PHASES, Shape
from rnnopt.models.params import init_params
from rnnopt.models.variants import get_variant, gpu_device_files, list_variants
from rnnopt.models.variants.base import DEVICES, DTYPES
from rnnopt.records import make_record, status_of, write_record


class VariantFailed(Exception):
    """The variant under test raised `error`; recorded, not propagated."""

    def __init__(self, error: BaseException):
        super().__init__(one_line(error))
        self.error = error


def one_line(error: BaseException) -> str:
    """`Type: first line of the message`, at most 300 characters."""
    lines = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
    return text[:300]


def guarded(function: Callable, *args, **kwargs):
    """Run variant code; its exceptions (MemoryError included) become VariantFailed."""
    try:
        return function(*args, **kwargs)
    except (Exception, MemoryError) as error:
        raise VariantFailed(error) from error


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value}")
    return value


def add_measurement_arguments(
    parser: argparse.ArgumentParser, phases=PHASES, several_phases: bool = False
) -> None:
    """The flags every per-variant measurement takes (Snakemake rules pass them all).

    With `several_phases`, --phase takes one or more phases and --out is a path template
    with {phase} in it."""
    parser.add_argument("--variant", required=True, help="variant name (rnnopt.list_variants)")
    parser.add_argument("--dtype", default="float32", choices=DTYPES)
    parser.add_argument("--device", default="cpu", choices=DEVICES)
    parser.add_argument("--batch", type=positive_int, required=True, metavar="B")
    parser.add_argument("--seq-len", type=positive_int, required=True, metavar="T")
    parser.add_argument("--input-size", type=positive_int, required=True, metavar="I")
    parser.add_argument("--hidden-size", type=positive_int, required=True, metavar="H")
    parser.add_argument(
        "--phase", choices=phases, required=True, nargs="+" if several_phases else None
    )
    parser.add_argument("--threads", type=positive_int, required=True, metavar="N")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out",
        required=True,
        metavar="FILE.json",
        help="record to write" + (" ({phase} is replaced by each phase)" if several_phases else ""),
    )


def shape_of(args: argparse.Namespace) -> Shape:
    return Shape(args.batch, args.seq_len, args.input_size, args.hidden_size)


def make_inputs(cell: str, shape: Shape, seed: int):
    """Float64 params, x (B, T, I) and grad_y (B, T, H) from `seed`: the same for all variants."""
    params = init_params(cell, shape.input_size, shape.hidden_size, seed)
    rng = np.random.default_rng(seed + 1)
    x = rng.standard_normal((shape.batch, shape.seq_len, shape.input_size))
    grad_y = rng.standard_normal((shape.batch, shape.seq_len, shape.hidden_size))
    return params, x, grad_y


def runner_factory(args: argparse.Namespace, lr: float = 1e-3):
    """(variant, make_runner) for the flags: make_runner() builds a fresh variant instance and
    runner on the same float64 inputs (variants cache workspaces on themselves, so a fresh
    measurement needs both fresh). VariantFailed when the variant cannot be built here (an
    unsupported or unavailable combination becomes status skipped)."""
    shape = shape_of(args)
    variant = guarded(get_variant, args.variant, dtype=args.dtype, device=args.device)
    try:
        params, x, grad_y = make_inputs(variant.cell, shape, args.seed)
    except MemoryError as error:  # a shape too large for this host: oom, like the variant's
        raise VariantFailed(error) from error

    def make_runner():
        fresh = get_variant(args.variant, dtype=args.dtype, device=args.device)
        return fresh.runner(params, x, grad_y, lr)

    return variant, make_runner


def prepare(args: argparse.Namespace, lr: float = 1e-3):
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


def record_fields(args: argparse.Namespace, variant=None) -> dict:
    """Record fields of a per-variant measurement; from the flags when no Variant was built."""
    fields = {"phase": args.phase, "shape": shape_of(args).as_dict(), "threads": args.threads}
    if variant is not None:
        return {**fields, "variant": variant}
    framework, cell, _ = args.variant.split("-", 2)  # registry names: framework-cell-kind
    return {
        **fields,
        "variant": args.variant,
        "framework": framework,
        "cell": cell,
        "dtype": args.dtype,
        "device": args.device,
    }


def config_of(args: argparse.Namespace) -> dict:
    return {k: v for k, v in vars(args).items() if k not in ("func", "command")}


def write_failure(
    kind: str, args: argparse.Namespace, failure: VariantFailed, variant=None, **extra
) -> int:
    """The record of a measurement the variant could not complete; exit status 0.

    A failure (not oom, not skipped) also prints the variant's traceback to stderr, the log.
    """
    status = status_of(failure.error)
    if status == "failed":
        traceback.print_exception(failure.error, file=sys.stderr)
    write_record(
        args.out,
        make_record(
            kind,
            seed=args.seed,
            config=config_of(args),
            status=status,
            reason=str(failure),
            **record_fields(args, variant),
            **extra,
        ),
    )
    print(f"rnnopt {kind}: {status}: {failure}")
    return 0


def uses_torch(variant_name: str, device: str = "cpu") -> bool:
    """Whether a variant's process needs torch (and its thread pools set): not the numpy ones,
    nor a torch one asked for cuda where no GPU device exists (it is only skipped)."""
    if device == "cuda" and not gpu_device_files():
        return False
    return not variant_name.startswith("numpy-")


def apply_variant_threads(args) -> dict:
    """apply_threads(--threads) in the job of --variant on --device: torch's pools too where
    the job uses torch. Returns the thread counts in force."""
    return apply_threads(args.threads, use_torch=uses_torch(args.variant, args.device))


def check_variant_name(name: str) -> None:
    """Unknown variant names are bad flags (exit 2), not skipped measurements.

    Only the registry is consulted: a variant whose module fails to import is a variant that
    crashed (a failed record), found when `prepare` builds it.
    """
    if name not in list_variants():
        raise UserError(f"unknown variant {name!r}; available: {', '.join(list_variants())}")
