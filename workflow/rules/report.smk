rule report:
    input:
        metrics=rules.aggregate.output.metrics,
        series=rules.aggregate.output.series,
    output:
        markdown="results/report/comparison.md",
        html=report(
            "results/report/comparison.html",
            caption="../report/comparison.rst",
            category="Tables",
        ),
        comparison=report(
            "results/report/tables/comparison.csv",
            caption="../report/comparison.rst",
            category="Tables",
        ),
        verification=report(
            "results/report/tables/verification.csv",
            caption="../report/verification.rst",
            category="Tables",
        ),
        variants=report(
            "results/report/tables/variants.csv",
            caption="../report/variants.rst",
            category="Tables",
        ),
        memory_table=report(
            "results/report/tables/memory.csv",
            caption="../report/memory_table.rst",
            category="Tables",
        ),
        speedup=report(
            "results/report/figures/speedup.png",
            caption="../report/speedup.rst",
            category="Figures",
        ),
        throughput=report(
            "results/report/figures/throughput_vs_batch.png",
            caption="../report/throughput_vs_batch.rst",
            category="Figures",
        ),
        seq_len=report(
            "results/report/figures/time_vs_seq_len.png",
            caption="../report/time_vs_seq_len.rst",
            category="Figures",
        ),
        memory=report(
            "results/report/figures/memory_vs_batch.png",
            caption="../report/memory_vs_batch.rst",
            category="Figures",
        ),
        loss=report(
            "results/report/figures/loss_curves.png",
            caption="../report/loss_curves.rst",
            category="Figures",
        ),
        timeline=report(
            "results/report/figures/memory_timeline.png",
            caption="../report/memory_timeline.rst",
            category="Figures",
        ),
        roofline=report(
            "results/report/figures/roofline.png",
            caption="../report/roofline.rst",
            category="Figures",
        ),
        cache_gc_precision=report(
            "results/report/tables/cache_gc_precision.csv",
            caption="../report/cache_gc_precision.rst",
            category="Tables",
        ),
        weights_vs_cache=report(
            "results/report/figures/weights_vs_cache.png",
            caption="../report/weights_vs_cache.rst",
            category="Figures",
        ),
        gc_churn=report(
            "results/report/figures/gc_churn.png",
            caption="../report/gc_churn.rst",
            category="Figures",
        ),
        precision_error=report(
            "results/report/figures/precision_error.png",
            caption="../report/precision_error.rst",
            category="Figures",
        ),
        batching=report(
            "results/report/tables/batching.csv",
            caption="../report/batching.rst",
            category="Tables",
        ),
        autobatch=report(
            "results/report/figures/autobatch.png",
            caption="../report/autobatch.rst",
            category="Figures",
        ),
        varlen=report(
            "results/report/figures/varlen.png",
            caption="../report/varlen.rst",
            category="Figures",
        ),
    log:
        "results/logs/report.log",
    params:
        out=lambda wildcards, output: Path(output.markdown).parent,
        source=REPORT_SOURCE,
        verdicts=VERDICT_FLAGS,
    shell:
        "python -m rnnopt report --metrics {input.metrics} --series {input.series} "
        "--out {params.out} {params.verdicts} > {log} 2>&1"


# `snakemake --cores all report_only`: table and figures again from whatever records are
# under results/ now (every run), without running or rerunning any measurement. A rule
# without outputs runs whenever it is asked for.
rule report_only:
    log:
        "results/logs/report_only.log",
    params:
        results="results",
        out="results/report",
        source=REPORT_SOURCE,
        verdicts=VERDICT_FLAGS,
    shell:
        "python -m rnnopt report --aggregate {params.results} --out {params.out} "
        "{params.verdicts} > {log} 2>&1"
