"""Placeholder: `rnnopt data` is being built."""


def register(subparsers):
    parser = subparsers.add_parser("data", help="(not yet implemented)")
    parser.set_defaults(func=lambda args: print("not yet implemented") or 1)
