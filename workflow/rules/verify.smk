# Verification is no timing: one process per device checks every (variant, dtype) the config
# uses there, one record each, and pays the imports (torch: ~2.4 s) once instead of per record.
# The CUDA records get a job of their own, so that only they ask for a GPU node on a cluster.
VERIFY_RULES = []

for verify_device in sorted({job["device"] for job in VERIFY_JOBS}):

    rule:
        name:
            "verify" if verify_device == "cpu" else f"verify_{verify_device}"
        output:
            records=[
                f"results/{{run}}/verify/{job['variant']}/{job['device']}-{job['dtype']}.json"
                for job in VERIFY_JOBS
                if job["device"] == verify_device
            ],
        log:
            f"results/{{run}}/logs/verify/{verify_device}.log",
        params:
            jobs=" ".join(
                f"{j['variant']}:{j['device']}:{j['dtype']}"
                for j in VERIFY_JOBS
                if j["device"] == verify_device
            ),
            caches=compile_caches,
            source=MEASURE_SOURCE,
        resources:
            mem_mb=verify_resource(job_mem_mb, max, verify_device),
            runtime=verify_runtime_min(verify_device),
            gpu=verify_resource(job_gpus, max, verify_device),
        shell:
            "{params.caches} "
            "python -m rnnopt verify --jobs {params.jobs} --threads 1 "
            "--out 'results/{wildcards.run}/verify/{{variant}}/{{device}}-{{dtype}}.json' "
            "> {log} 2>&1"

    VERIFY_RULES.append(
        getattr(rules, "verify" if verify_device == "cpu" else f"verify_{verify_device}")
    )
