"""`rnnopt env`: print the environment fingerprint every record carries, as JSON."""

from __future__ import annotations

import json

from rnnopt.measure.host import default_run_name, fingerprint


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "env", help="print the environment fingerprint (JSON)", description=__doc__
    )
    parser.add_argument("--run-name", action="store_true", help="print only the default run name")
    parser.set_defaults(func=run)


def run(args) -> int:
    if args.run_name:
        print(default_run_name())
    else:
        print(json.dumps(fingerprint(), indent=1))
    return 0
