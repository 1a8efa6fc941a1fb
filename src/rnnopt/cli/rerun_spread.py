"""`rnnopt rerun-spread RUN RUN RUN ...`: the between-run spread of each speedup on one host,
from three or more earlier runs of it (run folders, or results folders holding one run each),
written to a CSV that the report, the top-up and `rnnopt compare` take (--rerun-spread;
verdicts.rerun_spread in the workflow's config). Rows of other hosts already in the file stay.
"""

from __future__ import annotations

from pathlib import Path

from rnnopt.cli.common import write_output
from rnnopt.errors import UserError


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "rerun-spread",
        help="between-run spread of each speedup, from 3+ runs of one host",
        description=__doc__,
    )
    parser.add_argument("runs", nargs="+", metavar="RUN", help="result sets of one host's runs")
    parser.add_argument("--run", metavar="NAME", help="the run to read in each results folder")
    parser.add_argument("--out", required=True, metavar="FILE.csv", help="the CSV to write")
    parser.set_defaults(func=run)


def run(args) -> int:
    # pandas and scipy: imported by this command only
    from rnnopt.report.compare import load_run
    from rnnopt.report.rerun_spread import FEWEST_RUNS, estimate, merged

    if len(args.runs) < FEWEST_RUNS:
        raise UserError(f"rerun-spread: needs at least {FEWEST_RUNS} runs, got {len(args.runs)}")
    spread = estimate([load_run(path, args.run) for path in args.runs])
    if spread.empty:
        raise UserError(f"rerun-spread: no speedup measured in {FEWEST_RUNS} of the runs given")
    out = Path(args.out)
    table = merged(out, spread)
    write_output(out, lambda path: table.to_csv(path, index=False))
    run_name = spread["run"].iloc[0]
    for row in spread.itertuples(index=False):
        print(
            f"{row.candidate} vs {row.baseline}: between runs {row.run_sd_log:.2%}, within "
            f"{row.within_se_log:.2%} ({row.runs} runs, {row.speedup_low:.3f}-"
            f"{row.speedup_high:.3f}x)"
        )
    print(f"wrote {out}: {len(spread)} pairs of {run_name}")
    return 0
