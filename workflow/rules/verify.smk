rule verify:
    output:
        record="results/{run}/verify/{variant}/{device}-{dtype}.json",
    log:
        "results/{run}/logs/verify/{variant}/{device}-{dtype}.log",
    params:
        caches=compile_caches,
        source=MEASURE_SOURCE,
    resources:
        mem_mb=job_mem_mb,
        runtime=job_runtime_min,
        gpu=job_gpus,
    shell:
        "{params.caches} "
        "python -m rnnopt verify --variant {wildcards.variant} --dtype {wildcards.dtype} "
        "--device {wildcards.device} --threads 1 --out {output.record} > {log} 2>&1"
