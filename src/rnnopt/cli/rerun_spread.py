"""`rnnopt rerun-spread RUN RUN RUN ...`: the between-run spread of each speedup on one host,
from three or more earlier runs of it (run folders, or results folders holding one run each),
written to a CSV that the report, the top-up and `rnnopt compare` take (--rerun-spread;
verdicts.rerun_spread in the workflow's config), with how many of the runs read each speedup
faster, slower, no meaningful difference or inconclusive by the verdict rule (--threshold,
--confidence: give those the report uses), and each weights-vs-cache sweep's ratio (best
beyond L3 over best inside; no readings: its verdict has its own bound). Rows of other hosts
already in the file stay.
"""

from __future__ import annotations

import math
from pathlib import Path

from rnnopt.cli.common import fraction, write_output
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
    parser.add_argument(
        "--threshold",
        type=fraction,
        help="the verdict rule's threshold the runs' readings count by (default 0.05)",
    )
    parser.add_argument(
        "--confidence",
        type=fraction,
        help="the confidence of the intervals the readings count by (default 0.95)",
    )
    parser.set_defaults(func=run)


def run(args) -> int:
    # pandas and scipy: imported by this command only
    import pandas as pd

    from rnnopt.report.compare import load_run
    from rnnopt.report.intervals import CONFIDENCE, THRESHOLD
    from rnnopt.report.rerun_spread import FEWEST_RUNS, READS, estimate, merged

    if len(args.runs) < FEWEST_RUNS:
        raise UserError(f"rerun-spread: needs at least {FEWEST_RUNS} runs, got {len(args.runs)}")
    threshold = THRESHOLD if args.threshold is None else args.threshold
    confidence = CONFIDENCE if args.confidence is None else args.confidence
    runs = [load_run(path, args.run) for path in args.runs]
    spread = estimate(runs, threshold, confidence)
    if spread.empty:
        raise UserError(f"rerun-spread: no speedup measured in {FEWEST_RUNS} of the runs given")
    out = Path(args.out)
    table = merged(out, spread)
    write_output(out, lambda path: table.to_csv(path, index=False))
    run_name = spread["run"].iloc[0]
    for row in spread.to_dict("records"):
        counted = [(reading, row[c]) for c, reading in READS.items() if not pd.isna(row[c])]
        reads = ", ".join(f"{reading} {n}" for reading, n in counted if n)
        print(
            f"{row['candidate']} vs {row['baseline']}: between runs {row['run_sd_log']:.2%}, "
            f"within {row['within_se_log']:.2%} ({row['runs']} runs, {row['speedup_low']:.3f}-"
            f"{row['speedup_high']:.3f}x, pooled {math.exp(row['mean_log']):.3f}x"
            + (f"; read {reads})" if reads else ")")
        )
    print(f"wrote {out}: {len(spread)} pairs of {run_name}")
    return 0
