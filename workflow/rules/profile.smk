# Timing rules take every core Snakemake has (threads: all_cores), so that no other job
# runs beside them; the thread count of the measurement itself is the {threads} wildcard.


rule peak:
    output:
        record="results/{run}/peak/threads{threads}.json",
    log:
        "results/{run}/logs/peak/threads{threads}.log",
    params:
        source=MEASURE_SOURCE,
    threads: all_cores
    shell:
        "python -m rnnopt peak --threads {wildcards.threads} --out {output.record} > {log} 2>&1"


rule timer_check:
    output:
        record="results/{run}/timer-check/threads{threads}.json",
    log:
        "results/{run}/logs/timer-check/threads{threads}.log",
    params:
        flags=timer_check_flags,
        seed=config["seed"],
        source=MEASURE_SOURCE,
    threads: all_cores
    shell:
        "python -m rnnopt timer-check {params.flags} --threads {wildcards.threads} "
        "--seed {params.seed} --out {output.record} > {log} 2>&1"


rule profile:
    input:
        peak="results/{run}/peak/threads{threads}.json",
    output:
        record="results/{run}/profile/{variant}/{device}-{dtype}/"
        "b{batch}-t{seq_len}-i{input_size}-h{hidden_size}/{phase}-threads{threads}.json",
    log:
        "results/{run}/logs/profile/{variant}/{device}-{dtype}/"
        "b{batch}-t{seq_len}-i{input_size}-h{hidden_size}/{phase}-threads{threads}.log",
    params:
        seed=config["seed"],
        inductor_cache=inductor_cache,
        source=MEASURE_SOURCE,
    threads: all_cores
    shell:
        "TORCHINDUCTOR_CACHE_DIR={params.inductor_cache} "
        "python -m rnnopt profile --variant {wildcards.variant} --dtype {wildcards.dtype} "
        "--device {wildcards.device} --batch {wildcards.batch} --seq-len {wildcards.seq_len} "
        "--input-size {wildcards.input_size} --hidden-size {wildcards.hidden_size} "
        "--phase {wildcards.phase} --threads {wildcards.threads} --seed {params.seed} "
        "--peak {input.peak} --out {output.record} > {log} 2>&1"
