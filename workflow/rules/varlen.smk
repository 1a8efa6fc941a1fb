# Variable-length batching: one dataset (lengths uniform in [min_length, seq_len]) trained
# and timed padded, in length-sorted buckets and packed (masked without a packed kernel).
# A timing job: it takes every core (threads: all_cores).


rule varlen:
    output:
        record="results/{run}/varlen/{variant}/{device}-{dtype}.json",
    log:
        "results/{run}/logs/varlen/{variant}/{device}-{dtype}.log",
    params:
        task=config["varlen"]["task"],
        n_sequences=config["varlen"]["n_sequences"],
        seq_len=config["varlen"]["seq_len"],
        min_length=config["varlen"]["min_length"],
        batch=config["varlen"]["batch"],
        hidden_size=config["varlen"]["hidden_size"],
        epochs=config["varlen"]["epochs"],
        threads=config["varlen"]["threads"],
        seed=config["seed"],
        source=MEASURE_SOURCE,
    threads: all_cores
    resources:
        gpu=job_gpus,
    shell:
        "python -m rnnopt varlen --variant {wildcards.variant} --dtype {wildcards.dtype} "
        "--device {wildcards.device} --task {params.task} --n-sequences {params.n_sequences} "
        "--seq-len {params.seq_len} --min-length {params.min_length} --batch {params.batch} "
        "--hidden-size {params.hidden_size} --epochs {params.epochs} "
        "--threads {params.threads} --seed {params.seed} --out {output.record} > {log} 2>&1"
