"""`rnnopt verify`: every variant x dtype x device against the float64 reference.

Without --out: a table of every combination available here (or those named), the reference's
own check against torch autograd first; exit 1 if any fails. With --out: one record of kind
"verify" for exactly one variant, dtype and device (a FAIL is a measurement: exit 0). With
--jobs and an --out template: one record per job, all in this process (the pipeline's way:
verification is no timing, and one process pays the imports once instead of thirty times).
"""

from __future__ import annotations

import argparse
import sys

from tabulate import tabulate
from tqdm import tqdm

from rnnopt.cli.common import comma_list, config_of, fill_template, positive_int, set_threads
from rnnopt.errors import UnavailableError, UserError
from rnnopt.models.variants import CELLS, get_variant, list_variants
from rnnopt.models.variants.base import DEVICES, DTYPES
from rnnopt.models.verify import SEED, SHAPE, combinations, verify_reference, verify_variant
from rnnopt.records import failure_of, make_record, write_record

HEADERS = ("variant", "dtype", "device", "output", "worst gradient", "tolerance", "result")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "verify",
        help="check outputs and gradients of variants against the float64 reference",
        description=__doc__.split("\n\n")[1],
    )
    parser.add_argument(
        "--variant", type=comma_list(list_variants()), help="comma-separated; default all"
    )
    parser.add_argument("--dtype", type=comma_list(DTYPES), help="comma-separated; default all")
    parser.add_argument(
        "--device",
        "--devices",
        type=comma_list(DEVICES),
        help="comma-separated (cpu,cuda); default cpu, plus cuda when this host has a GPU",
    )
    parser.add_argument("--seed", type=int, default=SEED, help="seed of the test problem")
    parser.add_argument(
        "--threads", type=positive_int, metavar="N", help="torch and BLAS threads (default: as is)"
    )
    parser.add_argument(
        "--out",
        help="write one verify record here (one variant, dtype, device); with --jobs, a path "
        "template with {variant}, {device} and {dtype}",
    )
    parser.add_argument(
        "--jobs",
        nargs="+",
        type=verify_job,
        metavar="VARIANT:DEVICE:DTYPE",
        help="combinations to verify in this process, one record each (needs --out)",
    )
    parser.set_defaults(func=run)


def verify_job(text: str) -> tuple[str, str, str]:
    """VARIANT:DEVICE:DTYPE -> (variant, device, dtype), each checked."""
    parts = text.split(":")
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"expected VARIANT:DEVICE:DTYPE, got {text!r}")
    variant, device, dtype = parts
    for value, allowed, what in (
        (variant, list_variants(), "variant"),
        (device, DEVICES, "device"),
        (dtype, DTYPES, "dtype"),
    ):
        if value not in allowed:
            raise argparse.ArgumentTypeError(f"unknown {what} {value!r} in {text!r}")
    return variant, device, dtype


def run(args) -> int:
    threads = set_threads(args.threads)
    if args.jobs:
        return write_jobs(args, threads)
    if args.out:
        return write_one(args, threads)
    return print_table(args)


def write_jobs(args, threads: dict) -> int:
    """One record per --jobs combination, at the --out template filled in for each."""
    if not args.out or any(f"{{{key}}}" not in args.out for key in ("variant", "device", "dtype")):
        raise UserError("--jobs needs --out with {variant}, {device} and {dtype} in it")
    if args.variant or args.dtype or args.device:
        raise UserError("--jobs names the combinations: leave out --variant, --dtype, --device")
    for variant, device, dtype in args.jobs:
        fields = {"jobs": None, "variant": [variant], "device": [device], "dtype": [dtype]}
        out = fill_template(args.out, variant=variant, device=device, dtype=dtype)
        one = argparse.Namespace(**{**vars(args), **fields, "out": out})
        write_one(one, threads)
    return 0


def write_one(args, threads: dict) -> int:
    picked = [args.variant, args.dtype, args.device]
    if any(choice is None or len(choice) != 1 for choice in picked):
        raise UserError("--out needs exactly one --variant, one --dtype and one --device")
    (name,), (dtype,), (device,) = picked
    fields = {"config": config_of(args), "seed": args.seed, "shape": dict(SHAPE), **threads}
    try:
        variant = get_variant(name, dtype=dtype, device=device)
    except UserError as error:  # a combination this variant or host does not offer
        record = make_record(
            "verify",
            status="skipped",
            reason=str(error),
            variant=name,
            dtype=dtype,
            device=device,
            **fields,
        )
        write_record(args.out, record)
        return 0
    try:
        result = verify_variant(variant, args.seed)
    except Exception as error:  # the variant broke: a record, not a crash
        status, reason = failure_of(error)
        record = make_record("verify", status=status, reason=reason, variant=variant, **fields)
    else:
        metrics = {
            "max_rel_error": result.errors,
            "tolerance": result.tolerance,
            "passed": result.passed,
        }
        notes = list(getattr(variant, "notes", []))
        record = make_record("verify", metrics=metrics, variant=variant, notes=notes, **fields)
        if not result.passed:
            print(f"rnnopt verify: {name} {dtype} {device}: FAIL {result.errors}", file=sys.stderr)
    write_record(args.out, record)
    return 0


def print_table(args) -> int:
    rows = []
    if args.variant is None:  # the reference itself first, against torch autograd
        for cell in CELLS:
            result = verify_reference(cell, args.seed)
            rows.append(_result_row(f"reference-{cell} vs autograd", "float64", "cpu", result))
    triples = combinations(args.variant, args.dtype, args.device)
    for name, dtype, device in tqdm(triples, disable=not sys.stderr.isatty(), desc="verify"):
        try:
            result = verify_variant(get_variant(name, dtype=dtype, device=device), args.seed)
        except UnavailableError as error:
            rows.append([name, dtype, device, "", "", "", f"SKIP: {error}"])
            continue
        except Exception as error:
            rows.append([name, dtype, device, "", "", "", f"ERROR: {failure_of(error)[1]}"])
            continue
        rows.append(_result_row(name, dtype, device, result))
    print(tabulate(rows, headers=HEADERS, disable_numparse=True))
    return int(any(row[-1].startswith(("FAIL", "ERROR")) for row in rows))


def _result_row(name: str, dtype: str, device: str, result) -> list[str]:
    grad_name, grad_error = result.worst_gradient
    return [
        name,
        dtype,
        device,
        f"{result.errors['output']:.1e}",
        f"{grad_name} {grad_error:.1e}",
        f"{result.tolerance:.0e}" if result.tolerance < 1e-3 else f"{result.tolerance:.1e}",
        "PASS" if result.passed else "FAIL",
    ]
