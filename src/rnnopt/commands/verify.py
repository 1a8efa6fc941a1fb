"""Placeholder: `rnnopt verify` is being built."""


def register(subparsers):
    parser = subparsers.add_parser("verify", help="(not yet implemented)")
    parser.set_defaults(func=lambda args: print("not yet implemented") or 1)
