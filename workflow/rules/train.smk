rule train:
    input:
        data="results/{run}/datasets/{task}.npz",
        manifest="results/{run}/datasets/{task}.json",
    output:
        record="results/{run}/train/{task}/{setting}/{variant}/{device}-{dtype}-p{process}.json",
    log:
        "results/{run}/logs/train/{task}/{setting}/{variant}/{device}-{dtype}-p{process}.log",
    params:
        settings=train_flags,
        untimed=train_untimed_flag,
        caches=compile_caches,
        source=MEASURE_SOURCE,
    # The experiments (clipping, accumulation, batch size) compare times per step: they take
    # every core, so nothing runs beside them (--threads sets their pools), and the batch-size
    # runs repeat in passes as the profile jobs (train.experiments.repeats). The base runs
    # give loss curves only: one core each, untimed, two at a time.
    threads: train_cores
    priority: train_priority
    resources:
        mem_mb=job_mem_mb,
        runtime=job_runtime_min,
        gpu=job_gpus,
    shell:
        "{params.caches} "
        "python -m rnnopt train --variant {wildcards.variant} --dtype {wildcards.dtype} "
        "--device {wildcards.device} --data {input.data} {params.settings} "
        "{params.untimed} --process {wildcards.process} --out {output.record} > {log} 2>&1"
