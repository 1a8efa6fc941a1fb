"""What the commands share, and only the CLI knows: argparse types and flags, the record fields
and failure records of a per-variant measurement, thread settings from the flags."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from rnnopt.errors import UserError
from rnnopt.measure.harness import VariantFailed, shape_of, uses_torch
from rnnopt.measure.threads import apply_threads
from rnnopt.models.flops import PHASES
from rnnopt.models.variants import list_variants, name_parts
from rnnopt.models.variants.base import DEVICES, DTYPES
from rnnopt.records import failure_of, make_record, write_record


def comma_list(choices) -> callable:
    """argparse type: "a,b" -> ["a", "b"], each one of `choices`."""
    allowed = tuple(choices)

    def parse(text: str) -> list[str]:
        items = [item.strip() for item in text.split(",") if item.strip()]
        unknown = [item for item in items if item not in allowed]
        if unknown or not items:
            raise argparse.ArgumentTypeError(
                f"unknown value {(unknown or [text])[0]!r}; choose from {', '.join(allowed)}"
            )
        return items

    return parse


def set_threads(threads: int | None, use_torch: bool = True) -> dict:
    """Apply --threads (if given) before any work; the record fields that say so."""
    if not threads:
        return {}
    from rnnopt.measure.threads import apply_threads

    return {"threads": threads, "threads_effective": apply_threads(threads, use_torch)}


def int_at_least(minimum: int, what: str):
    """An argparse type: an integer >= `minimum`, `what` naming it in the error."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
        return value

    return parse


positive_int = int_at_least(1, "a positive integer")
non_negative_int = int_at_least(0, "an integer >= 0")


def fill_template(template: str, **fields: str) -> str:
    """--out with its {name} placeholders filled in; any other brace is part of the path
    (str.format would take `{x}` for a field and crash on it)."""
    for name, value in fields.items():
        template = template.replace(f"{{{name}}}", str(value))
    return template


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a finite positive number, got {value}")
    return value


def non_negative_float(text: str) -> float:
    """argparse type: a finite number >= 0 (0 is off: momentum, weight decay)."""
    if text.strip() in ("0", "0.0"):
        return 0.0
    try:
        return positive_float(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}") from None


def add_variant_arguments(parser: argparse.ArgumentParser) -> None:
    """--variant, --dtype, --device: which variant every per-variant command measures."""
    parser.add_argument("--variant", required=True, help="variant name (rnnopt.list_variants)")
    parser.add_argument(
        "--dtype", default="float32", choices=DTYPES, help="dtype the variant computes in"
    )
    parser.add_argument("--device", default="cpu", choices=DEVICES, help="where it computes")


def add_measurement_arguments(
    parser: argparse.ArgumentParser, phases=PHASES, several_phases: bool = False
) -> None:
    """The flags every per-variant measurement takes (Snakemake rules pass them all).

    With `several_phases`, --phase takes one or more phases and --out is a path template
    with {phase} in it."""
    add_variant_arguments(parser)
    add_shape_arguments(parser)
    parser.add_argument(
        "--phase",
        choices=phases,
        required=True,
        nargs="+" if several_phases else None,
        help="what one measured call is: forward, backward after an untimed forward, or a "
        "whole training step" + (" (several: one record each)" if several_phases else ""),
    )
    add_threads_argument(parser)
    add_seed_argument(parser)
    parser.add_argument(
        "--out",
        required=True,
        metavar="FILE.json",
        help="record to write" + (" ({phase} is replaced by each phase)" if several_phases else ""),
    )


def record_fields(args: argparse.Namespace, variant=None) -> dict:
    """Record fields of a per-variant measurement; from the flags when no Variant was built."""
    fields = {"phase": args.phase, "shape": shape_of(args).as_dict(), "threads": args.threads}
    if variant is not None:
        return {**fields, "variant": variant}
    return {**fields, **unbuilt_variant(args)}


def unbuilt_variant(args) -> dict:
    """The record's variant fields from the flags, for a variant that could not be built."""
    framework, cell, _ = name_parts(args.variant)
    return {
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
    status, _ = failure_of(failure.error)
    write_measurement(kind, args, variant, status=status, reason=str(failure), **extra)
    print(f"rnnopt {kind}: {status}: {failure}")
    return 0


def write_measurement(kind: str, args: argparse.Namespace, variant=None, **fields) -> None:
    """The record of a per-variant measurement, its seed, config and variant fields from the
    flags (metrics, status, notes, ... as keywords), written to --out."""
    record = make_record(
        kind, seed=args.seed, config=config_of(args), **record_fields(args, variant), **fields
    )
    write_record(args.out, record)


def apply_variant_threads(args) -> dict:
    """apply_threads(--threads) in the job of --variant on --device: torch's pools too where
    the job uses torch. Returns the thread counts in force."""
    return apply_threads(args.threads, use_torch=uses_torch(args.variant, args.device))


def check_variant_name(name: str) -> None:
    """Unknown variant names are bad flags (exit 2), not skipped measurements.

    Only the registry is consulted: a variant whose module fails to import is a variant that
    crashed (a failed record), found when `build_runner` builds it.
    """
    if name not in list_variants():
        raise UserError(f"unknown variant {name!r}; available: {', '.join(list_variants())}")


def fraction(text: str) -> float:
    """argparse type: a number strictly between 0 and 1."""
    value = positive_float(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got {value}")
    return value


def add_verdict_arguments(parser) -> None:
    """--threshold and --confidence of the verdict rules (rnnopt.report.intervals)."""
    parser.add_argument(
        "--threshold",
        type=fraction,
        help="smallest relative change that matters (default 0.05: intervals.THRESHOLD)",
    )
    parser.add_argument(
        "--confidence",
        type=fraction,
        help="confidence of the intervals (default 0.95: intervals.CONFIDENCE)",
    )
    parser.add_argument(
        "--rerun-spread",
        metavar="FILE.csv",
        help="this host's between-run spread of each speedup (`rnnopt rerun-spread`): widens "
        "the intervals of the runs it names (default: within-run intervals only)",
    )


def verdict_settings(args) -> tuple[float, float, dict | None]:
    """(threshold, confidence, spread) from --threshold / --confidence / --rerun-spread, the
    defaults where unset (spread: rnnopt.report.rerun_spread.read, None without the flag)."""
    from rnnopt.report.intervals import CONFIDENCE, THRESHOLD  # scipy: these commands only

    threshold = THRESHOLD if args.threshold is None else args.threshold
    confidence = CONFIDENCE if args.confidence is None else args.confidence
    spread = None
    if args.rerun_spread is not None:
        from rnnopt.report.rerun_spread import read

        spread = read(args.rerun_spread)
    return threshold, confidence, spread


def add_spell_arguments(parser) -> None:
    """--spell-log, --spell-wait-s, --spell-budget-s: the wait for a slow spell of the host to
    pass before timing (rnnopt.measure.spells; rnnopt.measure.profile.spell_gate)."""
    parser.add_argument(
        "--spell-log",
        metavar="FILE",
        help="the run's spell log (rnnopt.measure.spells): wait out a slow spell of the host "
        "before the timing loop, judged against the probes the log holds; no waiting without",
    )
    parser.add_argument(
        "--spell-wait-s",
        type=non_negative_float,
        default=5.0,
        help="seconds this process waits for a slow spell to pass, at most (default 5)",
    )
    parser.add_argument(
        "--spell-budget-s",
        type=non_negative_float,
        default=20.0,
        help="seconds all processes of the run wait in any ten minutes, at most, as the log "
        "sums them (default 20)",
    )


def add_timing_arguments(parser) -> None:
    parser.add_argument(
        "--min-time-s", type=positive_float, default=1.0, help="timed seconds, at least"
    )
    parser.add_argument("--min-calls", type=positive_int, default=10, help="timed calls, at least")
    parser.add_argument(
        "--max-warmup-calls",
        type=positive_int,
        default=10,
        help="untimed calls until the time is stable, at most (the record says if it was not)",
    )


def add_shape_arguments(parser, without: tuple[str, ...] = (), **defaults: int) -> None:
    """--batch, --seq-len, --input-size, --hidden-size: the shape (B, T, I, H) computed at,
    but for the flags `without` names; `defaults` (batch=..., seq_len=...) make those optional."""
    flags = (
        ("batch", "B", "sequences per call"),
        ("seq-len", "T", "time steps per sequence"),
        ("input-size", "I", "features of x_t"),
        ("hidden-size", "H", "units of h_t"),
    )
    for flag, metavar, meaning in flags:
        if flag in without:
            continue
        default = defaults.get(flag.replace("-", "_"))
        parser.add_argument(
            f"--{flag}",
            type=positive_int,
            required=default is None,
            default=default,
            metavar=metavar,
            help=meaning,
        )


def add_threads_argument(parser, required: bool = True) -> None:
    parser.add_argument(
        "--threads",
        type=positive_int,
        required=required,
        metavar="N",
        help="torch and BLAS threads of the measuring process (at most its cores)",
    )


def add_seed_argument(parser) -> None:
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the float64 weights and inputs"
    )


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions as written (the modules' docstrings); every optional flag's help ends with
    its default unless the help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        unset = action.default is None or action.default is False or action.default == []
        unset = unset or action.default == argparse.SUPPRESS
        if action.required or unset or "default" in text or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose help shows defaults (its subcommands' parsers too)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


def output_paths(results: str, args) -> tuple[Path, Path, Path]:
    """The aggregate's tables: --metrics, --csv, --series, by default in `results`."""
    root = Path(results)
    return (
        Path(args.metrics or root / "metrics.parquet"),
        Path(args.csv or root / "metrics.csv"),
        Path(args.series or root / "series.parquet"),
    )


def write_output(out: str | Path, write) -> None:
    """write(path) to a file beside `out`, then moved onto it, so a failure never leaves a
    half-written `out`; a folder that cannot be made or written is one line naming `out`. The
    temporary name keeps `out`'s suffixes (pandas picks compression from them)."""
    path = Path(out)
    partial = path.with_name(f".partial-{path.name}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(partial)
        partial.replace(path)
    except OSError as error:
        raise UserError(f"{out}: cannot write ({error.strerror or error})") from None
    finally:
        partial.unlink(missing_ok=True)
