# Precision (C6, C11): each variant and dtype against the float64 reference over one long
# sequence. Not a timing job: jobs may run side by side.


rule precision:
    output:
        record="results/{run}/precision/{variant}/{device}-{dtype}.json",
    log:
        "results/{run}/logs/precision/{variant}/{device}-{dtype}.log",
    params:
        shape=lambda wildcards: " ".join(
            f"--{key.replace('_', '-')} {value}"
            for key, value in config["precision"]["shape"].items()
        ),
        seed=config["seed"],
        source=MEASURE_SOURCE,
    resources:
        mem_mb=job_mem_mb,
        runtime=job_runtime_min,
        gpu=job_gpus,
    shell:
        "python -m rnnopt --isolate precision --variant {wildcards.variant} --dtype {wildcards.dtype} "
        "--device {wildcards.device} {params.shape} --threads 1 --seed {params.seed} "
        "--out {output.record} > {log} 2>&1"
