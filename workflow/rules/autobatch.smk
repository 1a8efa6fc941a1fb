# Automatic batch size (guide 4.5): the batch with the highest tokens/s whose measured peak
# fits config autobatch.budget_mib. A timing job: it takes every core (threads: all_cores).


rule autobatch:
    output:
        record="results/{run}/autobatch/{variant}/{device}-{dtype}.json",
    log:
        "results/{run}/logs/autobatch/{variant}/{device}-{dtype}.log",
    params:
        phase=config["autobatch"]["phase"],
        seq_len=config["autobatch"]["seq_len"],
        input_size=config["autobatch"]["input_size"],
        hidden_size=config["autobatch"]["hidden_size"],
        budget_mib=config["autobatch"]["budget_mib"],
        max_batch=config["autobatch"]["max_batch"],
        threads=config["autobatch"]["threads"],
        min_time_s=config["autobatch"]["min_time_s"],
        confirm_rounds=config["autobatch"]["confirm_rounds"],
        spells=spell_flags,
        seed=config["seed"],
        source=MEASURE_SOURCE,
    threads: all_cores
    resources:
        gpu=job_gpus,
    shell:
        "python -m rnnopt autobatch --variant {wildcards.variant} --dtype {wildcards.dtype} "
        "--device {wildcards.device} --phase {params.phase} --seq-len {params.seq_len} "
        "--input-size {params.input_size} --hidden-size {params.hidden_size} "
        "--budget-mib {params.budget_mib} --max-batch {params.max_batch} "
        "--threads {params.threads} --min-time-s {params.min_time_s} "
        "--confirm-rounds {params.confirm_rounds} {params.spells} --seed {params.seed} "
        "--out {output.record} > {log} 2>&1"
