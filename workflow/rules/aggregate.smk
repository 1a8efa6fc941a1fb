rule aggregate:
    input:
        run_records,
    output:
        metrics="results/metrics.parquet",
        csv="results/metrics.csv",
        series="results/series.parquet",
    log:
        "results/logs/aggregate.log",
    params:
        # Every run under results/ (other hosts and containers too), not only this config's.
        results=lambda wildcards, output: Path(output.metrics).parent,
        source=REPORT_SOURCE,
    shell:
        "python -m rnnopt aggregate --results {params.results} --metrics {output.metrics} "
        "--csv {output.csv} --series {output.series} > {log} 2>&1"


# This run's profile samples as a pyperf suite (`python -m pyperf stats|hist|compare_to`).
rule pyperf:
    input:
        run_records,
    output:
        f"results/pyperf/{RUN}.json",
    log:
        f"results/logs/pyperf-{RUN}.log",
    params:
        run_dir=f"results/{RUN}",
        source=REPORT_SOURCE,
    shell:
        "python -m rnnopt export-pyperf {params.run_dir} --out {output} > {log} 2>&1"
