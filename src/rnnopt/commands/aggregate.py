"""Placeholder: `rnnopt aggregate` is being built."""


def register(subparsers):
    parser = subparsers.add_parser("aggregate", help="(not yet implemented)")
    parser.set_defaults(func=lambda args: print("not yet implemented") or 1)
