"""Placeholder: `rnnopt env` is being built."""


def register(subparsers):
    parser = subparsers.add_parser("env", help="(not yet implemented)")
    parser.set_defaults(func=lambda args: print("not yet implemented") or 1)
