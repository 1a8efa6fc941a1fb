"""Placeholder: `rnnopt timer-check` is being built."""


def register(subparsers):
    parser = subparsers.add_parser("timer-check", help="(not yet implemented)")
    parser.set_defaults(func=lambda args: print("not yet implemented") or 1)
