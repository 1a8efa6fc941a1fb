"""Placeholder: `rnnopt peak` is being built."""


def register(subparsers):
    parser = subparsers.add_parser("peak", help="(not yet implemented)")
    parser.set_defaults(func=lambda args: print("not yet implemented") or 1)
