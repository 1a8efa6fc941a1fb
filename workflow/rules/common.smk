"""Config check, run name, source hashes, wildcard constraints and the job lists of every stage.

Helpers only; rules live in one file per stage. Paths: results/<run>/<stage>/..., logs under
results/<run>/logs/ mirroring them; the aggregate and the report sit in results/ itself,
because they merge every run found there.
"""

import hashlib
import sys
from pathlib import Path

import rnnopt
from rnnopt.errors import UserError
from rnnopt.measure.host import default_run_name
from rnnopt.pipeline import config_check

# The library checks the config against the package's schema (workflow/schemas/ links to it)
# and fills its defaults: one filler for the workflow and the tests (Snakemake's validate()
# fills them its own way, and prints the whole schema on an error instead of one line).
# Snakemake's YAML reading keeps the last of two equal keys and merges `key: {}` as nothing:
# each config file is read again strictly first.
try:
    for configfile in workflow.configfiles:
        config_check.read_file(configfile)
    checked = config_check.check(config)
except UserError as error:
    sys.exit(f"rnnopt: bad config: {error}")
config.clear()
config.update(checked)

# The image the Dockerfile builds: used with --software-deployment-method apptainer only;
# the usual way is to run snakemake inside that image, or in the project's virtualenv.
container: "docker://rnnopt:cpu"

# Jobs run `python -m rnnopt` with the interpreter that runs Snakemake (the virtualenv's).
shell.prefix(f'PATH="{Path(sys.executable).parent}:$PATH"; ')

RUN = default_run_name() if config["run"] == "auto" else config["run"]
# The report's verdict rules (config `verdicts`; rnnopt.report.intervals), and the host's
# between-run spread where its file exists (rnnopt.report.rerun_spread).
RERUN_SPREAD = config["verdicts"].get("rerun_spread")
RERUN_SPREAD = RERUN_SPREAD if RERUN_SPREAD and Path(RERUN_SPREAD).is_file() else None
VERDICT_FLAGS = "--threshold {threshold} --confidence {confidence}".format(**config["verdicts"])
if RERUN_SPREAD:
    VERDICT_FLAGS += f" --rerun-spread {RERUN_SPREAD}"


def source_hash(package: Path, exclude: tuple[str, ...] = ()) -> str:
    """Digest of the package's sources: a rule whose params hold it reruns when they change."""
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*")):
        relative = path.relative_to(package).as_posix()
        if path.suffix in (".py", ".json") and not relative.startswith(exclude):
            digest.update(relative.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


PACKAGE = Path(rnnopt.__file__).parent
# Measurements do not depend on the reporting code: editing a figure reruns only the report.
REPORTING = ("report/", "cli/aggregate.py", "cli/report.py")
MEASURE_SOURCE = source_hash(PACKAGE, exclude=(*REPORTING, "pipeline/"))
REPORT_SOURCE = source_hash(PACKAGE)

VERIFY_JOBS = config_check.verify_jobs(config)
TRAIN_JOBS = config_check.train_jobs(config["train"])
TRAIN_SETTINGS = config_check.train_settings(config["train"])
TRAIN_STEPS = {config_check.train_job_key(job): job["steps"] for job in TRAIN_JOBS}
PROFILE_JOBS = config_check.profile_processes(config)
PASSES = max((job["process"] for job in PROFILE_JOBS + TRAIN_JOBS), default=0) + 1
PROFILE_JOB_KEYS = ("variant", "dtype", "device", "threads", *config_check.SHAPE_KEYS)
NATIVE_ONLY = {
    tuple(str(job[key]) for key in PROFILE_JOB_KEYS)
    for job in config_check.native_only_jobs(config["profile"])
}
MIN_CALLS = {
    tuple(str(dict(job)[key]) for key in PROFILE_JOB_KEYS): calls
    for job, calls in config_check.profile_min_calls(config).items()
}
MEMORY_JOBS = config_check.measure_jobs(config["memory"])
PROFILED_THREADS = [{"threads": n} for n in config_check.profiled_threads(config)]
CHURN_JOBS = [
    job | {"gc": gc} for job in config_check.measure_jobs(config["churn"]) for gc in ("on", "off")
]
PRECISION_JOBS = config_check.precision_jobs(config["precision"])
TIMER_CHECK_JOBS = config_check.timer_check_jobs(config)
AUTOBATCH_JOBS = [{k: config["autobatch"][k] for k in ("variant", "dtype", "device")}]
VARLEN_JOBS = [
    {"variant": variant, "dtype": config["varlen"]["dtype"], "device": config["varlen"]["device"]}
    for variant in config["varlen"]["variants"]
]


wildcard_constraints:
    run=r"[A-Za-z0-9][A-Za-z0-9._-]*",
    variant="|".join(rnnopt.list_variants()),
    dtype="float64|float32|tfloat32|bfloat16|float16",
    device="cpu|cuda",
    phase="forward|backward|step",
    task="adding|copy|sine",
    setting=r"base|clip-off|clip-on|accum-\d+x\d+|batch-\d+",
    batch=r"\d+",
    seq_len=r"\d+",
    input_size=r"\d+",
    hidden_size=r"\d+",
    threads=r"\d+",
    process=r"\d+",


def all_cores(wildcards) -> int:
    """Threads of a timing job: every core Snakemake has, so that nothing runs beside it
    (unless timing_alone is false). A function, read when jobs are scheduled: --report and
    --unlock need no --cores."""
    return workflow.cores if config["timing_alone"] else 1


def untimed_train(wildcards) -> bool:
    """The base runs give loss curves only: untimed; the experiments compare times."""
    return wildcards.setting == "base"


def train_cores(wildcards) -> int:
    """Threads of a train job: one for an untimed run, every core for a timed one."""
    return 1 if untimed_train(wildcards) else all_cores(wildcards)


def train_priority(wildcards) -> int:
    """A timed run's processes in the passes of the profile jobs; the untimed runs fill in."""
    return 0 if untimed_train(wildcards) else pass_priority(wildcards)


def train_untimed_flag(wildcards) -> str:
    return "--untimed" if untimed_train(wildcards) else ""


KERNEL_CACHE = ".kernel-cache"


def compile_caches(wildcards) -> str:
    """Kernel caches of torch.compile and numba, per run, as the environment of the job's
    command: reruns reuse compiled kernels instead of paying compilation again. Outside
    results/, which users copy between hosts to merge runs: numba unpickles its cache index and
    Inductor loads the shared objects it finds, so a cache must never come from elsewhere."""
    cache = f"{KERNEL_CACHE}/{wildcards.run}"
    return f"TORCHINDUCTOR_CACHE_DIR={cache}/torchinductor NUMBA_CACHE_DIR={cache}/numba"


def timing_flags(wildcards) -> str:
    """The timing protocol's budget of a profile job, from config["timing"]; min_calls from
    the job's entry where it sets its own."""
    return timing_budget({name: getattr(wildcards, name) for name in PROFILE_JOB_KEYS})


def timing_budget(job: dict) -> str:
    """The timing flags of the profile job `job` (PROFILE_JOB_KEYS), or of one that no entry
    profiles: config["timing"]'s."""
    timing = config["timing"]
    key = tuple(str(job[name]) for name in PROFILE_JOB_KEYS)
    min_calls = MIN_CALLS.get(key, timing["min_calls"])
    return (
        f"--min-time-s {timing['min_time_s']} --min-calls {min_calls} "
        f"--max-warmup-calls {timing['max_warmup_calls']}"
    )


def spell_flags(wildcards) -> str:
    """The wait for a slow spell of the host to pass before a profile job's timing loop and
    before each of autobatch's confirmation rounds (rnnopt.measure.spells): the run's spell
    log and config["timing"]'s limits."""
    timing = config["timing"]
    return (
        f"--spell-log results/{wildcards.run}/spells.log "
        f"--spell-wait-s {timing['spell_wait_s']} --spell-budget-s {timing['spell_budget_s']}"
    )


def pass_priority(wildcards) -> int:
    """Process r of every timing job before process r + 1: earlier passes rank higher."""
    return PASSES - int(wildcards.process)


def native_flag(wildcards) -> str:
    """--native-only for the jobs of profile entries marked native_only."""
    key = tuple(getattr(wildcards, name) for name in PROFILE_JOB_KEYS)
    return "--native-only" if key in NATIVE_ONLY else ""


def split_flags(wildcards) -> str:
    """The phases of a profile job that also time their GEMM-only loop (rnnopt.measure.split)."""
    return f"--split-phases {' '.join(config['timing']['split_phases'])}"


def train_flags(wildcards) -> str:
    """The flags of one training setting (base, clip-on, accum-4x16, batch-128, ...)."""
    train = config["train"]
    setting = TRAIN_SETTINGS[wildcards.setting]
    steps = TRAIN_STEPS.get(config_check.train_job_key(wildcards), train["steps"])
    flags = [
        f"--steps {steps}",
        f"--hidden-size {train['hidden_size']}",
        f"--threads {train['threads']}",
        f"--seed {config['seed']}",
        f"--holdout-fraction {train['holdout_fraction']}",
        f"--eval-every {train['eval_every']}",
        f"--batch {setting['batch']}",
        f"--accumulate {setting['accumulate']}",
        f"--optimizer {setting['optimizer']}",
        f"--lr {setting['lr']}",
    ]
    if setting["momentum"]:
        flags.append(f"--momentum {setting['momentum']}")
    if setting["clip_norm"] is not None:
        flags.append(f"--clip-norm {setting['clip_norm']}")
    return " ".join(flags)


def peak_dtypes_flag(wildcards) -> str:
    """The CPU dtypes the profile jobs at these threads are judged against: only their
    ceilings are measured (every one where no profile job runs at that count)."""
    dtypes = config_check.peak_dtypes(config, int(wildcards.threads))
    return f"--dtypes {' '.join(dtypes)}" if dtypes else ""


def timer_check_flags(wildcards) -> str:
    """The checked closure, timed by the budget its profile job has at that shape and thread
    count: the check is of the harness as the run uses it."""
    check = config["timer_check"]
    job = {"variant": check["variant"], "dtype": check["dtype"], "device": "cpu"}
    job |= {name: getattr(wildcards, name) for name in ("threads", *config_check.SHAPE_KEYS)}
    return (
        f"--variant {check['variant']} --dtype {check['dtype']} --phase {check['phase']} "
        + timing_budget(job)
    )


def records_of(rule, jobs: list[dict]) -> list[str]:
    """The record paths of `rule` for this run's jobs (every output of a job is a record)."""
    return [path.format(run=RUN, **job) for job in jobs for path in rule.output]


def measured_records(wildcards) -> list[str]:
    """Every record of this run's measurement jobs: what the top-up judges the verdicts on."""
    return (
        [path.format(run=RUN) for rule in VERIFY_RULES for path in rule.output]
        + records_of(rules.train, TRAIN_JOBS)
        + records_of(rules.peak, PROFILED_THREADS)
        + records_of(rules.timer_check, TIMER_CHECK_JOBS)
        + records_of(rules.profile, PROFILE_JOBS)
        + records_of(rules.memory, MEMORY_JOBS)
        + records_of(rules.churn, CHURN_JOBS)
        + records_of(rules.precision, PRECISION_JOBS)
        + records_of(rules.autobatch, AUTOBATCH_JOBS)
        + records_of(rules.varlen, VARLEN_JOBS)
    )


def run_records(wildcards) -> list[str]:
    """Every record this config asks of this run (the aggregate also reads other runs): the
    measurement jobs' and the top-up's folder."""
    return measured_records(wildcards) + [f"results/{RUN}/topup"]
