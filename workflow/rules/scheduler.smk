# Snakemake's job rate limiter (--max-jobs-per-timespan, default 100/1s) re-runs the scheduler
# once a second for as long as a job runs: a scheduling round over every ready job (and the ILP
# solver) that wakes on the timing job's cores. Profile processes measured 60 involuntary
# context switches a second under it against 3 without it (docs/workflow.md, "A quiet
# scheduler"). Locally a finished job wakes the scheduler anyway, so the limiter only costs;
# a cluster executor keeps it, to spare the batch system's controller.
onstart:
    if workflow.local_exec:
        workflow.scheduler.job_rate_limiter = None
