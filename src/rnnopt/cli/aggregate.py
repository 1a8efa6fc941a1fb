"""`rnnopt aggregate`: every record of every run under results/ -> tidy metrics and series.

Writes metrics.parquet and metrics.csv (one row per record and metric) and series.parquet
(one row per record, series and step); see rnnopt.report.aggregate for the columns.
"""

from __future__ import annotations

from rnnopt.cli.common import output_paths


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "aggregate",
        help="merge every record under results/ into tidy parquet/csv tables",
        description=__doc__,
    )
    add_aggregate_arguments(parser)
    parser.set_defaults(func=run)


def add_aggregate_arguments(parser, results_flag: str = "--results") -> None:
    parser.add_argument(results_flag, default="results", help="results root")
    parser.add_argument("--metrics", help="metrics table (default RESULTS/metrics.parquet)")
    parser.add_argument("--csv", help="metrics as CSV (default RESULTS/metrics.csv)")
    parser.add_argument("--series", help="series table (default RESULTS/series.parquet)")


def run(args) -> int:
    from rnnopt.report.aggregate import aggregate  # pandas: imported by this command only

    metrics_path, csv_path, series_path = output_paths(args.results, args)
    metrics, series = aggregate(args.results, metrics_path, csv_path, series_path)
    print(summary(metrics))
    print(f"wrote {metrics_path}, {csv_path}, {series_path} ({len(series)} series points)")
    return 0


def summary(metrics) -> str:
    """`N records from R runs: kind status count, ...` in one line."""
    records = metrics.drop_duplicates("source")
    counts = records.groupby(["kind", "status"]).size()
    parts = ", ".join(f"{kind} {status} {n}" for (kind, status), n in counts.items())
    return f"{len(records)} records from {records['run'].nunique()} runs: {parts or 'none'}"
