"""`rnnopt export-pyperf RUN_DIR --out FILE.json`: a run's profile samples as a pyperf benchmark
suite (one benchmark per profile row, one pyperf run per process), for `python -m pyperf stats`,
`hist` and `compare_to`."""

from __future__ import annotations


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "export-pyperf", help="a run's profile samples as a pyperf suite", description=__doc__
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run folder: results/<run>/")
    parser.add_argument(
        "--out", required=True, metavar="FILE.json", help="suite to write (.json or .json.gz)"
    )
    parser.set_defaults(func=run)


def run(args) -> int:
    from rnnopt.report.pyperf_export import export  # pyperf: imported by this command only

    suite = export(args.run_dir, args.out)
    runs = sum(len(benchmark.get_runs()) for benchmark in suite.get_benchmarks())
    print(f"wrote {args.out} ({len(suite)} benchmarks, {runs} runs)")
    return 0
