rule train:
    input:
        data="results/{run}/datasets/{task}.npz",
        manifest="results/{run}/datasets/{task}.json",
    output:
        record="results/{run}/train/{task}/{setting}/{variant}/{device}-{dtype}.json",
    log:
        "results/{run}/logs/train/{task}/{setting}/{variant}/{device}-{dtype}.log",
    params:
        settings=train_flags,
        caches=compile_caches,
        source=MEASURE_SOURCE,
    # Timed: the job takes every core, so nothing runs beside it (--threads sets its pools).
    threads: all_cores
    resources:
        mem_mb=job_mem_mb,
        runtime=job_runtime_min,
        gpu=job_gpus,
    shell:
        "{params.caches} "
        "python -m rnnopt train --variant {wildcards.variant} --dtype {wildcards.dtype} "
        "--device {wildcards.device} --data {input.data} {params.settings} "
        "--out {output.record} > {log} 2>&1"
