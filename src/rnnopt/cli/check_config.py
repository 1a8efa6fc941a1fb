"""`rnnopt check-config FILE [OVERLAY ...]`: the workflow's config check, before Snakemake.

The Snakefile runs the same check before any job; this command also catches what stops inside
Snakemake's own config loader, before any rnnopt code runs (a file that is not UTF-8 there is a
49-line traceback). `make run` runs it first on config/config.yaml and $(CONFIG).
"""

from __future__ import annotations

from rnnopt.pipeline import config_check


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "check-config",
        help="check config files as the workflow would merge them (one line per problem)",
        description=__doc__,
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="config files, merged in order")
    parser.set_defaults(func=run)


def run(args) -> int:
    files = list(dict.fromkeys(args.files))  # `make run` names the default config twice
    config = config_check.load(*files)
    jobs = len(config_check.profile_processes(config))
    print(f"{' + '.join(files)}: ok (run {config['run']!r}, {jobs} profile processes)")
    return 0
