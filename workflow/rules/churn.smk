# GC and object churn (C2, C12): one phase timed with Python's cyclic collector on and off,
# each in a fresh process. A timing job: it takes every core (threads: all_cores).


rule churn:
    output:
        record="results/{run}/churn/{variant}/{device}-{dtype}/"
        "b{batch}-t{seq_len}-i{input_size}-h{hidden_size}/{phase}-threads{threads}-gc-{gc}.json",
    log:
        "results/{run}/logs/churn/{variant}/{device}-{dtype}/"
        "b{batch}-t{seq_len}-i{input_size}-h{hidden_size}/{phase}-threads{threads}-gc-{gc}.log",
    wildcard_constraints:
        gc="on|off",
    params:
        seed=config["seed"],
        timing=timing_flags,
        source=MEASURE_SOURCE,
    threads: all_cores
    resources:
        mem_mb=job_mem_mb,
        runtime=job_runtime_min,
        gpu=job_gpus,
    shell:
        "python -m rnnopt --isolate churn --variant {wildcards.variant} --dtype {wildcards.dtype} "
        "--device {wildcards.device} --batch {wildcards.batch} --seq-len {wildcards.seq_len} "
        "--input-size {wildcards.input_size} --hidden-size {wildcards.hidden_size} "
        "--phase {wildcards.phase} --threads {wildcards.threads} --gc {wildcards.gc} "
        "--seed {params.seed} {params.timing} --out {output.record} > {log} 2>&1"
