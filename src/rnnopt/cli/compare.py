"""`rnnopt compare A B`: result set B against result set A (a run folder, or a results folder
holding one run): each profile row's time ratio B/A with its interval over processes, each
memory peak's ratio, each comparison-table speedup's change B/A with its interval, and the
verdicts that changed, as markdown.

With --fail-on METRIC the exit status is 1 when a row of METRIC regresses beyond the
threshold (a library upgrade gated in CI): a profile time or a memory peak larger in B, or an
optimisation's speedup smaller in B; 0 otherwise; 2 for bad flags or paths.
"""

from __future__ import annotations

import sys

from rnnopt.cli.common import add_verdict_arguments, verdict_settings, write_output

FAIL_ON = ("time", "peak_mib", "speedup")  # rnnopt.report.compare.Comparison.regressions


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "compare", help="compare two result sets (B against A)", description=__doc__
    )
    parser.add_argument("a", metavar="A", help="baseline result set: results/<run>/ or results/")
    parser.add_argument("b", metavar="B", help="candidate result set, compared against A")
    parser.add_argument("--run", metavar="NAME", help="the run to read in a results folder")
    add_verdict_arguments(parser)
    parser.add_argument("--out", metavar="FILE.md", help="write the markdown here, not stdout")
    parser.add_argument("--csv", metavar="FILE", help="write the profile and memory rows as CSV")
    parser.add_argument(
        "--fail-on",
        action="append",
        choices=FAIL_ON,
        default=[],
        metavar="METRIC",
        help=f"exit 1 when a row of METRIC ({', '.join(FAIL_ON)}) regresses; repeatable",
    )
    parser.set_defaults(func=run)


def run(args) -> int:
    # pandas and scipy: imported by this command only
    from rnnopt.report.compare import compare, markdown, numbers, summary

    threshold, confidence, spread = verdict_settings(args)
    comparison = compare(args.a, args.b, args.run, threshold, confidence, spread)
    text = markdown(comparison, args.a, args.b, threshold, confidence)
    if args.csv:
        write_output(args.csv, lambda path: numbers(comparison).to_csv(path, index=False))
    if args.out:
        write_output(args.out, lambda path: path.write_text(text + "\n"))
        print(summary(comparison))
        print(f"wrote {args.out}")
    else:
        print(text)
    failing = {metric: n for metric in args.fail_on if (n := comparison.regressions(metric))}
    for metric, n in failing.items():
        print(
            f"rnnopt compare: {n} {metric} rows regress beyond {threshold:.0%}",
            file=sys.stderr,
        )
    return 1 if failing else 0
