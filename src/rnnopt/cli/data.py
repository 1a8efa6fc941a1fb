"""`rnnopt data make|inspect`: write a synthetic dataset (.npz + .json manifest), or verify one."""

from __future__ import annotations

import argparse

from rnnopt.cli.common import positive_int
from rnnopt.errors import UserError
from rnnopt.records import one_line
from rnnopt.train import data


def register(subparsers) -> None:
    parser = subparsers.add_parser("data", help="make or inspect a synthetic sequence dataset")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    make = actions.add_parser("make", help="generate a dataset and write PATH.npz + PATH.json")
    make.add_argument("--task", required=True, help=f"one of: {', '.join(data.TASKS)}")
    make.add_argument(
        "--n-sequences", type=positive_int, required=True, help="sequences to generate"
    )
    make.add_argument("--seq-len", type=positive_int, required=True, help="time steps per sequence")
    make.add_argument("--seed", type=int, default=0, help="same seed, same bytes")
    make.add_argument(
        "--variable-length",
        action="store_true",
        help="draw each length in [seq_len//2, seq_len]; zero padding after it",
    )
    make.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="task parameter (copy: n_symbols, copy_len; sine: noise_std, omega_min, omega_max)",
    )
    make.add_argument("--out", required=True, help="output path ending in .npz")
    make.set_defaults(func=run_make)

    inspect = actions.add_parser("inspect", help="verify a dataset and print its manifest")
    inspect.add_argument("path", help="dataset .npz (its .json manifest lies beside it)")
    inspect.set_defaults(func=run_inspect)


def parse_params(pairs: list[str]) -> dict[str, str]:
    params = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UserError(f"--param {pair!r}: expected KEY=VALUE")
        params[key] = value
    return params


def run_make(args: argparse.Namespace) -> int:
    try:
        dataset = data.generate(
            args.task,
            n_sequences=args.n_sequences,
            seq_len=args.seq_len,
            seed=args.seed,
            variable_length=args.variable_length,
            **parse_params(args.param),
        )
        path = data.save(dataset, args.out)
    except MemoryError as error:
        raise UserError(
            f"--n-sequences {args.n_sequences} --seq-len {args.seq_len}: the dataset does not "
            f"fit in memory ({one_line(error)})"
        ) from None
    manifest = data.load(path).manifest
    print(f"wrote {path}: {summary(manifest)}, sha256 {manifest['sha256'][:16]}")
    return 0


def run_inspect(args: argparse.Namespace) -> int:
    manifest = data.load(args.path).manifest
    parameters = " ".join(f"{key}={value}" for key, value in manifest["parameters"].items())
    print(f"{args.path}: {summary(manifest)}")
    print(f"  generator {manifest['generator']}, seed {manifest['seed']}, {parameters}")
    print(f"  baseline_loss {manifest['baseline_loss']:.4g}: {manifest['baseline']}")
    print(f"  sha256 {manifest['sha256']} verified")
    return 0


def summary(manifest: dict) -> str:
    arrays = ", ".join(
        f"{name} {tuple(spec['shape'])} {spec['dtype']}"
        for name, spec in manifest["arrays"].items()
    )
    return (
        f"task {manifest['task']}, {arrays}, input_size {manifest['input_size']}, "
        f"output_size {manifest['output_size']}, loss {manifest['loss']}"
    )
