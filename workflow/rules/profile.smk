# Timing rules take every core Snakemake has (threads: all_cores), so that no other job
# runs beside them; the thread count of the measurement itself is the {threads} wildcard.


rule peak:
    output:
        record="results/{run}/peak/threads{threads}.json",
    log:
        "results/{run}/logs/peak/threads{threads}.log",
    params:
        dtypes=peak_dtypes_flag,
        source=MEASURE_SOURCE,
    threads: all_cores
    resources:
        mem_mb=job_mem_mb,
        runtime=job_runtime_min,
    shell:
        "python -m rnnopt peak --threads {wildcards.threads} {params.dtypes} "
        "--out {output.record} > {log} 2>&1"


rule timer_check:
    output:
        record="results/{run}/timer-check/b{batch}-t{seq_len}-i{input_size}-h{hidden_size}/"
        "threads{threads}.json",
    log:
        "results/{run}/logs/timer-check/b{batch}-t{seq_len}-i{input_size}-h{hidden_size}/"
        "threads{threads}.log",
    params:
        flags=timer_check_flags,
        seed=config["seed"],
        source=MEASURE_SOURCE,
    threads: all_cores
    resources:
        mem_mb=job_mem_mb,
        runtime=job_runtime_min,
    shell:
        "python -m rnnopt --isolate timer-check {params.flags} --batch {wildcards.batch} "
        "--seq-len {wildcards.seq_len} --input-size {wildcards.input_size} "
        "--hidden-size {wildcards.hidden_size} --threads {wildcards.threads} "
        "--seed {params.seed} --out {output.record} > {log} 2>&1"


# One process per variant, dtype, device, shape, thread count and {process} times all three
# phases, in order, on one runner: the process start (imports, the runner's conversions) is
# paid once. Each job runs in timing.repeats processes, in passes: every job's process 0
# before any process 1 (the priority), so that the host's drift over a run lands inside each
# row's spread between processes instead of between rows.
rule profile:
    input:
        peak="results/{run}/peak/threads{threads}.json",
    output:
        forward="results/{run}/profile/{variant}/{device}-{dtype}/"
        "b{batch}-t{seq_len}-i{input_size}-h{hidden_size}/forward-threads{threads}-p{process}.json",
        backward="results/{run}/profile/{variant}/{device}-{dtype}/"
        "b{batch}-t{seq_len}-i{input_size}-h{hidden_size}/backward-threads{threads}-p{process}.json",
        step="results/{run}/profile/{variant}/{device}-{dtype}/"
        "b{batch}-t{seq_len}-i{input_size}-h{hidden_size}/step-threads{threads}-p{process}.json",
    log:
        "results/{run}/logs/profile/{variant}/{device}-{dtype}/"
        "b{batch}-t{seq_len}-i{input_size}-h{hidden_size}/threads{threads}-p{process}.log",
    params:
        seed=config["seed"],
        timing=timing_flags,
        spells=spell_flags,
        split=split_flags,
        native=native_flag,
        caches=compile_caches,
        out=lambda wildcards, output: output.step.replace("step-threads", "{phase}-threads"),
        source=MEASURE_SOURCE,
    threads: all_cores
    priority: pass_priority
    resources:
        mem_mb=job_mem_mb,
        runtime=job_runtime_min,
        gpu=job_gpus,
    shell:
        "{params.caches} "
        "python -m rnnopt --isolate profile --variant {wildcards.variant} --dtype {wildcards.dtype} "
        "--device {wildcards.device} --batch {wildcards.batch} --seq-len {wildcards.seq_len} "
        "--input-size {wildcards.input_size} --hidden-size {wildcards.hidden_size} "
        "--phase forward backward step --threads {wildcards.threads} --seed {params.seed} "
        "--process {wildcards.process} {params.timing} {params.spells} {params.split} "
        "{params.native} "
        "--peak {input.peak} --out '{params.out}' > {log} 2>&1"


# After every other measurement of the run: the verdicts whose speed interval still crosses
# the threshold get more processes of their jobs, step by step, within topup_budget_s
# (rnnopt.cli.topup). A timing job: it takes every core, and runs one process at a time.
rule topup:
    input:
        records=measured_records,
        spread=RERUN_SPREAD or [],
    output:
        directory("results/{run}/topup"),
    log:
        "results/{run}/logs/topup.log",
    params:
        budget=config["timing"]["topup_budget_s"],
        max_processes=config["timing"]["topup_max_repeats"],
        verdicts=VERDICT_FLAGS,
        caches=compile_caches,
        source=MEASURE_SOURCE,
    threads: all_cores
    resources:
        mem_mb=topup_mem_mb,
        runtime=topup_runtime_min,
    shell:
        "{params.caches} "
        "python -m rnnopt topup results/{wildcards.run} --budget-s {params.budget} "
        "--max-processes {params.max_processes} {params.verdicts} > {log} 2>&1"
