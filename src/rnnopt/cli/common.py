"""Pieces the per-variant commands share: list-valued flags, failure reasons, record fields."""

from __future__ import annotations

import argparse

from rnnopt.records import status_of


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


def failure(error: BaseException) -> tuple[str, str]:
    """(status, one-line reason) of an exception that ended a measurement."""
    message = " ".join(str(error).split()) or "no message"
    return status_of(error), f"{type(error).__name__}: {message}"[:500]


def config_of(args) -> dict:
    """The parsed flags as a JSON-able config, without the handler."""
    return {key: value for key, value in vars(args).items() if key != "func"}


def set_threads(threads: int | None, use_torch: bool = True) -> dict:
    """Apply --threads (if given) before any work; the record fields that say so."""
    if not threads:
        return {}
    from rnnopt.measure.threads import apply_threads

    return {"threads": threads, "threads_effective": apply_threads(threads, use_torch)}
