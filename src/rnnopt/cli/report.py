"""`rnnopt report`: the comparison table (md, html, csv), verification and variant tables,
and the figures, from the aggregate's tables. With --aggregate RESULTS, first aggregate every
record under RESULTS (what `snakemake report_only` runs: no measurement reruns)."""

from __future__ import annotations

from rnnopt.cli.common import add_verdict_arguments, output_paths, verdict_settings


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "report", help="comparison table, verification table and figures", description=__doc__
    )
    parser.add_argument(
        "--aggregate",
        metavar="RESULTS",
        help="aggregate the records under RESULTS first (writes RESULTS/metrics.parquet, ...)",
    )
    parser.add_argument("--metrics", help="tidy metrics (default results/metrics.parquet)")
    parser.add_argument("--csv", help="with --aggregate: metrics CSV (default RESULTS/metrics.csv)")
    parser.add_argument("--series", help="tidy series (default results/series.parquet)")
    parser.add_argument("--out", default="results/report", help="report directory")
    add_verdict_arguments(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    from rnnopt.report.aggregate import aggregate, read  # pandas, matplotlib: this command only
    from rnnopt.report.build import build

    metrics_path, csv_path, series_path = output_paths(args.aggregate or "results", args)
    if args.aggregate:
        metrics, series = aggregate(args.aggregate, metrics_path, csv_path, series_path)
    else:
        metrics, series = read(metrics_path, series_path)
    paths = build(metrics, series, args.out, *verdict_settings(args))
    verdicts = paths and _verdict_counts(paths["comparison"])
    print(f"wrote {args.out}/comparison.md, comparison.html, tables/, figures/ ({verdicts})")
    return 0


def _verdict_counts(comparison_csv) -> str:
    import pandas as pd

    from rnnopt.report.table import ALL_SHAPES

    table = pd.read_csv(comparison_csv)
    kinds = table[table["shape"] == ALL_SHAPES]["category"]
    return ", ".join(f"{n} {kind}" for kind, n in kinds.value_counts().items()) or "no runs"
