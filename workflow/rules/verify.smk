# Verification is no timing: one process checks every (variant, device, dtype) the config
# uses, one record each, and pays the imports (torch: ~2.4 s) once instead of per record.
VERIFY_OUTPUTS = [
    f"results/{{run}}/verify/{job['variant']}/{job['device']}-{job['dtype']}.json"
    for job in VERIFY_JOBS
]


rule verify:
    output:
        records=VERIFY_OUTPUTS,
    log:
        "results/{run}/logs/verify.log",
    params:
        jobs=" ".join(f"{j['variant']}:{j['device']}:{j['dtype']}" for j in VERIFY_JOBS),
        caches=compile_caches,
        source=MEASURE_SOURCE,
    resources:
        mem_mb=lambda wildcards: verify_resource(job_mem_mb, max),
        runtime=verify_runtime_min,
        gpu=lambda wildcards: verify_resource(job_gpus, max),
    shell:
        "{params.caches} "
        "python -m rnnopt verify --jobs {params.jobs} --threads 1 "
        "--out 'results/{wildcards.run}/verify/{{variant}}/{{device}}-{{dtype}}.json' "
        "> {log} 2>&1"
