# Memory is measured in processes apart from timing; these jobs may share the machine.


rule memory:
    output:
        record="results/{run}/memory/{variant}/{device}-{dtype}/"
        "b{batch}-t{seq_len}-i{input_size}-h{hidden_size}/{phase}-threads{threads}.json",
    log:
        "results/{run}/logs/memory/{variant}/{device}-{dtype}/"
        "b{batch}-t{seq_len}-i{input_size}-h{hidden_size}/{phase}-threads{threads}.log",
    params:
        seed=config["seed"],
        caches=compile_caches,
        source=MEASURE_SOURCE,
    threads: lambda wildcards: int(wildcards.threads)
    resources:
        mem_mb=job_mem_mb,
        runtime=job_runtime_min,
        gpu=job_gpus,
    shell:
        "{params.caches} "
        "python -m rnnopt --isolate memory --variant {wildcards.variant} --dtype {wildcards.dtype} "
        "--device {wildcards.device} --batch {wildcards.batch} --seq-len {wildcards.seq_len} "
        "--input-size {wildcards.input_size} --hidden-size {wildcards.hidden_size} "
        "--phase {wildcards.phase} --threads {wildcards.threads} --seed {params.seed} "
        "--out {output.record} > {log} 2>&1"
