rule dataset:
    output:
        data="results/{run}/datasets/{task}.npz",
        manifest="results/{run}/datasets/{task}.json",
    log:
        "results/{run}/logs/datasets/{task}.log",
    params:
        n_sequences=config["datasets"]["n_sequences"],
        seq_len=config["datasets"]["seq_len"],
        variable_length="--variable-length" if config["datasets"]["variable_length"] else "",
        seed=config["seed"],
        source=MEASURE_SOURCE,
    resources:
        mem_mb=job_mem_mb,
        runtime=job_runtime_min,
    shell:
        "python -m rnnopt data make --task {wildcards.task} "
        "--n-sequences {params.n_sequences} --seq-len {params.seq_len} --seed {params.seed} "
        "{params.variable_length} --out {output.data} > {log} 2>&1"
