"""The Snakemake workflow: lint, dry runs of every config, bad configs, and (slow) a whole run
of config/ci.yaml in a temporary copy, then a second run that does nothing, then resumption
after an interrupted run."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import matplotlib.image
import pandas as pd
import pytest
import yaml

import rnnopt
from rnnopt import list_variants
from rnnopt.errors import UserError
from rnnopt.pipeline import config_check
from rnnopt.report.comparisons import COMPARISONS
from rnnopt.report.figures import FIGURES
from tests.measure_helpers import default_sigint

REPO = Path(__file__).resolve().parents[1]
WORKFLOW_FILES = ("Snakefile", "workflow", "config")


def snakemake(cwd: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "snakemake", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def workdir(tmp_path) -> Path:
    """The workflow (not results/ or .snakemake/) copied to a fresh directory."""
    for name in WORKFLOW_FILES:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, tmp_path / name, symlinks=True)
        else:
            shutil.copy2(source, tmp_path / name)
    return tmp_path


def files_under(path: Path) -> set[Path]:
    return {p.relative_to(path) for p in path.rglob("*")}


def test_config_expands_to_jobs():
    config = config_check.check(
        {
            "profile": [
                {
                    "variants": ["numpy-lstm-naive", "torch-*-nn"],
                    "threads": [1, "all"],
                    "shapes": [{"batch": [1, 4], "seq_len": 5, "input_size": 3, "hidden_size": 2}],
                }
            ],
            "train": {
                "runs": [{"variants": ["numpy-rnn-*"], "tasks": ["sine"]}],
                "experiments": {"repeats": 3},
            },
        }
    )
    jobs = config_check.profile_jobs(config["profile"], cores=8)
    assert len(jobs) == 3 * 2 * 2  # variants x threads x batches; every job times 3 phases
    assert all("phase" not in job for job in jobs)
    assert {job["threads"] for job in jobs} == {1, 8}
    assert {job["variant"] for job in jobs} == {"numpy-lstm-naive", "torch-rnn-nn", "torch-lstm-nn"}
    settings = config_check.train_settings(config["train"])
    assert settings["accum-4x16"] == settings["base"] | {"batch": 16, "accumulate": 4}
    assert settings["clip-on"]["clip_norm"] == 1.0 and settings["clip-off"]["clip_norm"] is None
    assert {"batch-8", "batch-32", "batch-128", "accum-1x64"} <= set(settings)
    trained = config_check.train_jobs(config["train"])
    assert {(j["variant"], j["task"]) for j in trained if j["setting"] == "base"} == {
        (name, "sine") for name in rnnopt.list_variants() if name.startswith("numpy-rnn-")
    }
    # the batch-size runs' tokens/s decide a verdict: train.experiments.repeats processes each
    # (the others one)
    processes = {}
    for job in trained:
        processes.setdefault(job["setting"], []).append(job["process"])
    assert processes["batch-8"] == processes["batch-128"] == [0, 1, 2]
    assert processes["clip-on"] == processes["accum-4x16"] == [0]
    assert set(processes["base"]) == {0}
    verified = config_check.verify_jobs(config, cores=8)
    precision = config_check.precision_jobs(config["precision"])
    used = {(j["variant"], j["dtype"], j["device"]) for j in jobs + trained + precision}
    assert used | {("torch-lstm-nn", "float32", "cpu")} == {
        (j["variant"], j["dtype"], j["device"]) for j in verified
    }


@pytest.mark.parametrize(
    ("cores", "l2_mib", "size"),
    [(2, 1, 256), (2, 2, 384), (1, 1, 128), (4, 1, 384), (2, None, 256), (2, 0.25, 128)],
)
def test_l2_size_fits_each_cores_slice_of_w_hh_in_its_l2(monkeypatch, cores, l2_mib, size):
    # 4H x H float32 / cores below one core's L2: H=256 (512 KiB a core) for 1 MiB on two
    # cores, 384 (1.1 MiB) for 2 MiB; the smallest step when nothing fits; 256 when unknown
    l2 = None if l2_mib is None else int(l2_mib * 2**20)
    monkeypatch.setattr("rnnopt.measure.host.cpu_caches", lambda: {"l2": l2} if l2 else {})
    config = config_check.check(
        {
            "profile": [
                {
                    "variants": ["numpy-lstm-persistent"],
                    "shapes": [{"batch": 8, "seq_len": 3, "input_size": "l2", "hidden_size": "l2"}],
                }
            ]
        }
    )
    (job,) = config_check.profile_jobs(config["profile"], cores=cores)
    assert (job["input_size"], job["hidden_size"]) == (size, size)
    if l2 and size > config_check.L2_FIT_STEP:
        assert 4 * size * size * 4 / cores < l2 <= 4 * (size + 128) ** 2 * 4 / cores


def test_only_l2_is_a_named_size():
    shape = {"batch": 8, "seq_len": 3, "input_size": 4, "hidden_size": "l3"}
    with pytest.raises(UserError, match="profile\\[0\\].shapes\\[0\\].hidden_size"):
        config_check.check({"profile": [{"variants": ["numpy-lstm-fused"], "shapes": [shape]}]})


def test_every_profile_job_runs_in_its_entrys_processes():
    shape = {"batch": 1, "seq_len": 5, "input_size": 3, "hidden_size": 2}
    entries = [
        {"variants": ["numpy-lstm-naive", "numpy-lstm-fused"], "shapes": [shape]},
        {"variants": ["numpy-lstm-fused"], "shapes": [shape], "repeats": 5},  # the same job
        {"variants": ["numpy-rnn-fused"], "shapes": [shape], "repeats": 1},
    ]
    config = config_check.check({"profile": entries, "timing": {"repeats": 2}})
    jobs = config_check.profile_processes(config)
    processes = {}
    for job in jobs:
        processes.setdefault(job["variant"], []).append(job["process"])
    # the largest count of the entries that ask for a job; timing.repeats where none is set
    assert processes == {
        "numpy-lstm-naive": [0, 1],
        "numpy-lstm-fused": [0, 1, 2, 3, 4],
        "numpy-rnn-fused": [0],
    }


def test_an_entry_may_set_its_own_timed_calls():
    shape = {"batch": 1, "seq_len": 5, "input_size": 3, "hidden_size": 2}
    entries = [
        {"variants": ["numpy-lstm-naive", "numpy-lstm-fused"], "shapes": [shape]},
        {"variants": ["numpy-lstm-fused"], "shapes": [shape], "min_calls": 4},
        {"variants": ["numpy-lstm-fused"], "shapes": [shape], "min_calls": 3},  # the fewest
    ]
    config = config_check.check({"profile": entries})
    wanted = {
        dict(job)["variant"]: calls for job, calls in config_check.profile_min_calls(config).items()
    }
    assert wanted == {"numpy-lstm-fused": 3}  # the naive job keeps timing.min_calls
    with pytest.raises(UserError, match=r"profile\[0\].min_calls: 2 is less than"):
        config_check.check({"profile": [{"variants": ["numpy-lstm-naive"], "min_calls": 2}]})


def test_the_default_run_times_three_calls_at_the_fastrnns_shape(workdir):
    dry = snakemake(workdir, "-n", "-p", "--cores", "2")
    assert dry.returncode == 0, dry.stderr
    profile = [line for line in dry.stdout.splitlines() if "rnnopt --isolate profile" in line]
    fastrnns = [line for line in profile if "--batch 64 --seq-len 100" in line]
    assert fastrnns and all("--min-calls 3 " in line for line in fastrnns)
    assert all("--min-calls 5 " in line for line in profile if line not in fastrnns)
    # the timer check times our harness by the budget of the profile job it checks
    checks = [line for line in dry.stdout.splitlines() if "rnnopt --isolate timer-check" in line]
    budget = r"--min-time-s (\S+) --min-calls (\d+) --max-warmup-calls (\d+)"
    budgets = {"--batch 64 " in line: re.search(budget, line).groups() for line in checks}
    assert budgets == {True: ("0.3", "3", "4"), False: ("0.3", "5", "4")}


def test_a_later_train_entry_sets_the_steps_of_its_runs():
    entries = [
        {"variants": ["numpy-rnn-*"], "tasks": ["sine"]},
        {"variants": ["*-naive"], "tasks": ["sine"], "steps": 7},
    ]
    config = config_check.check({"train": {"runs": entries}})
    trained = config_check.train_jobs(config["train"])
    base = {j["variant"]: j["steps"] for j in trained if j["setting"] == "base"}
    assert base["numpy-rnn-naive"] == base["numpy-lstm-naive"] == 7
    others = {steps for variant, steps in base.items() if not variant.endswith("-naive")}
    assert others == {config["train"]["steps"]} and "numpy-rnn-fused" in base
    assert {j["steps"] for j in trained if j["setting"] != "base"} == {config["train"]["steps"]}
    assert len(trained) == len({config_check.train_job_key(j) for j in trained})


def test_timer_checks_follow_the_thread_counts_each_shape_is_profiled_at():
    small = {"batch": 2, "seq_len": 3, "input_size": 4, "hidden_size": 5}
    large = {"batch": 6, "seq_len": 7, "input_size": 8, "hidden_size": 9}
    other = {"batch": 1, "seq_len": 1, "input_size": 1, "hidden_size": 1}
    config = config_check.check(
        {
            "profile": [
                {"variants": ["torch-lstm-nn"], "shapes": [small]},
                {"variants": ["torch-lstm-nn"], "threads": [1, "all"], "shapes": [large]},
            ],
            "timer_check": {"shapes": [small, large, other, large | {"threads": [1, 3]}]},
        }
    )
    jobs = config_check.timer_check_jobs(config, cores=4)
    assert jobs == [
        {"threads": 1, **small},  # profiled at 1 thread only
        {"threads": 1, **large},
        {"threads": 4, **large},
        {"threads": 1, **other},  # profiled nowhere: every profiled count
        {"threads": 4, **other},
        {"threads": 1, **large},  # narrowed by its own threads (3 is not profiled)
    ]


def test_every_config_has_every_variant_family():
    for name in ("ci", "full", None):
        overlays = [REPO / "config" / f"{name}.yaml"] if name else []
        config = config_check.load(REPO / "config" / "config.yaml", *overlays)
        kinds = {job["variant"].split("-")[2] for job in config_check.verify_jobs(config)}
        assert kinds == {name.split("-")[2] for name in list_variants()}
    # The GPU run: every torch family on the GPU (the NumPy ladder is the CPU run's).
    config = config_check.load(REPO / "config" / "config.yaml", REPO / "config" / "gpu.yaml")
    on_gpu = {
        job["variant"].split("-")[2]
        for job in config_check.verify_jobs(config)
        if job["device"] == "cuda"
    }
    assert on_gpu == {name.split("-")[2] for name in list_variants() if name.startswith("torch")}
    for overlays in ([], [REPO / "config" / "ci.yaml"]):  # the default and CI runs: every variant
        config = config_check.load(REPO / "config" / "config.yaml", *overlays)
        assert {j["variant"] for j in config_check.verify_jobs(config)} == set(list_variants())


def test_peak_jobs_measure_the_dtypes_profiled_at_their_thread_count():
    profile = [
        {"variants": ["numpy-lstm-fused"], "dtypes": ["float64", "float32"], "threads": [1]},
        {"variants": ["torch-lstm-nn"], "dtypes": ["bfloat16", "float32"], "threads": [4]},
        {"variants": ["torch-lstm-nn"], "dtypes": ["float16"], "devices": ["cuda"], "threads": [4]},
    ]
    config = config_check.check({"profile": profile})
    assert config_check.peak_dtypes(config, 1, cores=4) == ["float32", "float64"]
    assert config_check.peak_dtypes(config, 4, cores=4) == ["bfloat16", "float32"]  # CPU only
    assert config_check.peak_dtypes(config, 2, cores=4) == []


def test_lint_is_clean(workdir):
    done = snakemake(workdir, "--lint")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Congratulations" in done.stdout + done.stderr


@pytest.mark.parametrize("config", [None, "full", "gpu", "ci"])
def test_dry_run(workdir, config):
    extra = ["--configfile", f"config/{config}.yaml"] if config else []
    done = snakemake(workdir, "-n", "--cores", "2", *extra)
    assert done.returncode == 0, done.stdout + done.stderr
    for rule in ("verify", "train", "profile", "memory", "peak", "timer_check", "aggregate"):
        assert f"\n{rule} " in done.stdout
    assert not (workdir / "results").exists()


def test_profile_passes_rank_by_process(workdir):
    """Process r of every timing job (profile, the timed training runs) ranks above process
    r + 1 (Snakemake's priority), so the jobs run in passes; every other rule (the untimed
    training runs too) keeps the default priority 0."""
    done = snakemake(workdir, "-n", "--forceall", "--cores", "2", "--configfile", "config/ci.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
    blocks = re.findall(r"rule (\w+):\n(.*?)(?=\n\[|\Z)", done.stdout, flags=re.DOTALL)
    ranks = {}
    for rule, block in blocks:
        priority = re.search(r"^\s+priority: (\d+)$", block, flags=re.MULTILINE)
        process = re.search(r"process=(\d+)", block)
        timed_train = rule == "train" and "setting=base" not in block
        if rule == "profile" or timed_train:
            ranks.setdefault(int(process.group(1)), set()).add(int(priority.group(1)))
        else:
            assert priority is None or priority.group(1) == "0", block
    assert ranks == {0: {2}, 1: {1}}
    repeated = [b for r, b in blocks if r == "train" and "process=1" in b]
    assert repeated and all("setting=batch-" in block for block in repeated)


def test_kernel_caches_stay_out_of_results(workdir):
    """A run copied in from another host (results/<run>/) never brings code a job would load:
    torch.compile's and numba's caches live in .kernel-cache/<run>/ (issue 23, item 2)."""
    done = snakemake(workdir, "-n", "-p", "--cores", "2", "--configfile", "config/ci.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
    caches = re.findall(r"(TORCHINDUCTOR_CACHE_DIR|NUMBA_CACHE_DIR)=(\S+)", done.stdout)
    assert caches, "no profile command in the dry run"
    for _, path in caches:
        assert path.startswith(".kernel-cache/") and "results" not in path, path


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ("sed: 1\n", "'sed'"),
        ("train:\n  steps: many\n", "train.steps"),
        (
            "profile:\n  - variants: [numpy-lstm-naive]\n    shapes: [{batch: x}]\n",
            "profile[0].shapes[0].batch",
        ),
        ("profile:\n  - variantz: ['*']\n", "'variantz' under profile[0]"),
        ("memory:\n  - variants: [numpy-lstm-foo]\n", "memory[0].variants[0]"),
        (
            "train:\n  experiments:\n    accumulation: {batch: 10, micro_batches: 4}\n",
            "train.experiments.accumulation.batch",
        ),
    ],
)
def test_bad_config_stops_with_one_line(workdir, config, key):
    """config/config.yaml edited badly: one line on stderr naming the key, nothing else."""
    default = workdir / "config" / "config.yaml"
    merged = yaml.safe_load(default.read_text())
    config_check.merge(merged, yaml.safe_load(config))
    default.write_text(yaml.safe_dump(merged))
    before = files_under(workdir)
    done = snakemake(workdir, "--cores", "1")
    assert done.returncode != 0
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("rnnopt: bad config: ") and key in lines[0]
    written = files_under(workdir) - before
    assert not (workdir / "results").exists()
    assert all(p.parts[:2] == (".snakemake", "log") for p in written - {Path(".snakemake")})


def test_bad_overlay_names_the_key(workdir):
    (workdir / "bad.yaml").write_text("train:\n  stepz: 3\n")
    done = snakemake(workdir, "-n", "--cores", "1", "--configfile", "bad.yaml")
    assert done.returncode != 0 and "Traceback" not in done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if "bad config" in line]
    assert errors == [
        "rnnopt: bad config: unknown key 'stepz' under train; allowed: "
        "batch, clip_norm, eval_every, experiments, hidden_size, holdout_fraction, lr, "
        "optimizer, runs, steps, threads"
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("seed: 1\nseed: 2\n", "key 'seed' given twice (lines 1 and 2)"),
        (
            "profile: {}\n",
            "profile: {} changes nothing (mappings merge key by key); "
            "to empty a list write profile: []",
        ),
    ],
)
def test_a_config_file_is_read_strictly(workdir, text, message):
    """A repeated key was kept silently (the last one), and `profile: {}` in an overlay
    changed nothing (issue 23, item 18): both stop the run with one line naming the file."""
    (workdir / "bad.yaml").write_text(text)
    done = snakemake(workdir, "-n", "--cores", "1", "--configfile", "bad.yaml")
    assert done.returncode != 0 and "Traceback" not in done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if "bad config" in line]
    assert errors == [f"rnnopt: bad config: {workdir / 'bad.yaml'}: {message}"]


def test_check_config_names_a_file_snakemake_cannot_read(tmp_path, capsys):
    from rnnopt.cli import main

    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("run: caf\xe9\n".encode("latin-1"))
    assert main(["check-config", "config/config.yaml", str(bad)]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and f"{bad}: not a readable YAML config" in captured.err
    good = tmp_path / "good.yaml"
    good.write_text("run: mine\n")
    assert main(["check-config", "config/config.yaml", "config/config.yaml", str(good)]) == 0
    assert capsys.readouterr().out.startswith(f"config/config.yaml + {good}: ok (run 'mine'")


def test_make_run_checks_the_config_before_snakemake():
    dry = subprocess.run(
        ["make", "-n", "run", "CONFIG=my.yaml"], capture_output=True, text=True, check=True
    )
    commands = [line for line in dry.stdout.splitlines() if "rnnopt" in line or "snakemake" in line]
    assert "check-config config/config.yaml my.yaml" in commands[0]
    assert "snakemake" in commands[1] and "--configfile my.yaml" in commands[1]


def test_the_config_loader_is_strict(tmp_path):
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("about: caf\xe9\n".encode("latin-1"))
    with pytest.raises(UserError, match=r"latin1.yaml: not a readable YAML config \('utf-8'"):
        config_check.read_file(bad)
    nested = tmp_path / "nested.yaml"
    nested.write_text("train:\n  steps: 3\n  steps: 4\n")
    with pytest.raises(UserError, match=r"key 'steps' given twice \(lines 2 and 3\)"):
        config_check.load(nested)


# ---------------------------------------------------------------- end to end (slow)


def run_ci(workdir: Path, *extra: str) -> subprocess.CompletedProcess:
    return snakemake(workdir, "--cores", "all", "--configfile", "config/ci.yaml", *extra)


def records_under(results: Path) -> int:
    return len(list(results.glob("*/*/**/*.json")))


def interrupt_mid_run(workdir: Path, signum: int, *extra: str) -> None:
    """Start the ci run and send `signum` to its process group (Ctrl-C: SIGINT; a killed
    container: SIGKILL) once two more records are written and a job is running."""
    before = records_under(workdir / "results")
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "snakemake",
            "--cores",
            "all",
            "--configfile",
            "config/ci.yaml",
            *extra,
        ],
        cwd=workdir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=default_sigint,
    )
    incomplete = workdir / ".snakemake" / "incomplete"
    deadline = time.monotonic() + 300
    while run.poll() is None and time.monotonic() < deadline:
        if records_under(workdir / "results") >= before + 2 and any(incomplete.glob("*")):
            break
        time.sleep(0.1)
    assert run.poll() is None, "the run ended before it could be interrupted"
    os.killpg(run.pid, signum)
    run.wait(timeout=120)


@pytest.mark.slow
def test_ci_run_interrupted_resumed_then_nothing_then_report_only(workdir):
    pytest.importorskip("torch")
    results = workdir / "results"
    interrupt_mid_run(workdir, signal.SIGKILL)  # a killed container leaves the lock behind
    assert snakemake(workdir, "--unlock", "--configfile", "config/ci.yaml").returncode == 0
    # Ctrl-C, in the resumed run: Snakemake cleans up after itself
    interrupt_mid_run(workdir, signal.SIGINT, "--rerun-incomplete")
    assert not (results / "metrics.parquet").exists()
    done = run_ci(workdir, "--rerun-incomplete")
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-5000:]

    metrics = pd.read_parquet(results / "metrics.parquet")
    assert set(metrics["run"]) == {"ci"}
    verified = metrics[metrics["kind"] == "verify"]
    assert set(verified["variant"]) == set(list_variants())  # every variant present
    config = config_check.load(workdir / "config/config.yaml", workdir / "config/ci.yaml")
    trained = metrics[metrics["kind"] == "train"]["source"].nunique()
    assert trained == len(config_check.train_jobs(config["train"]))
    # two processes a job (the passes' order: test_profile_passes_rank_by_process), and the
    # top-up's processes of undecided verdicts' jobs after them (numbered 2, 3, ...)
    profiled = metrics[metrics["kind"] == "profile"].drop_duplicates("source")
    topped = profiled["source"].str.startswith("ci/topup/")
    base = profiled[~topped]
    per_job = base.groupby(["variant", "dtype", "device", "batch", "seq_len", "hidden_size"])
    assert set(base["process"]) == {0, 1} and per_job["process"].nunique().eq(2).all()
    assert (profiled.loc[topped, "process"] >= 2).all()
    assert "undecided" in (results / "ci" / "logs" / "topup.log").read_text()
    assert (results / "pyperf" / "ci.json").is_file()
    cuda = metrics[(metrics["device"] == "cuda") & (metrics["kind"] == "profile")]
    assert len(cuda) and set(cuda["status"]) <= {"skipped", "ok"}
    assert (results / "metrics.csv").is_file() and (results / "series.parquet").is_file()

    report = results / "report"
    comparison = pd.read_csv(report / "tables" / "comparison.csv")
    assert (comparison["shape"] == "all").sum() == len(COMPARISONS)
    assert set(comparison["run"]) == {"ci"}
    assert "ci: verdict" in (report / "comparison.md").read_text()
    for name in FIGURES:
        png = report / "figures" / f"{name}.png"
        assert png.stat().st_size > 10_000
        assert matplotlib.image.imread(png).shape[1] >= 600

    again = run_ci(workdir)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr

    # report_only: tables and figures again from the records, nothing else runs
    stamp = (report / "comparison.md").stat().st_mtime_ns
    only = snakemake(workdir, "report_only", "--cores", "all", "--configfile", "config/ci.yaml")
    assert only.returncode == 0, only.stdout[-3000:] + only.stderr[-3000:]
    assert re.search(r"report_only\s+1\s+total\s+1", only.stdout + only.stderr)
    assert (report / "comparison.md").stat().st_mtime_ns > stamp
    assert "Nothing to be done" in run_ci(workdir, "-n").stdout

    # docs/workflow.md's recipe for a deleted record (issue 23, item 10): a plain run does
    # nothing, --forcerun aggregate remakes the record, the aggregate and the report
    next(results.glob("ci/profile/**/step-threads1-p1.json")).unlink()
    assert "Nothing to be done" in run_ci(workdir, "-n").stdout
    planned = run_ci(workdir, "-n", "--forcerun", "aggregate").stdout
    for rule, count in (("profile", 1), ("aggregate", 1), ("report", 1)):
        assert re.search(rf"^{rule}\s+{count}$", planned, flags=re.MULTILINE), planned


@pytest.mark.parametrize("run", ["..", ".", ".hidden", "../elsewhere"])
def test_a_run_name_cannot_leave_results(run):
    """`run: ..` wrote datasets/ and logs/ into the repository root (issue 23, item 3)."""
    with pytest.raises(UserError, match=r"^run: .* does not match"):
        config_check.check({"run": run})


@pytest.mark.parametrize(
    ("overlay", "key"),
    [
        ({"timing": {"min_time_s": float("inf")}}, "timing.min_time_s"),
        ({"train": {"lr": float("nan")}}, "train.lr"),
        ({"train": {"holdout_fraction": float("nan")}}, "train.holdout_fraction"),
    ],
)
def test_numbers_must_be_finite(overlay, key):
    """min_time_s: .inf hung every profile job; a NaN learning rate stopped the run later."""
    with pytest.raises(UserError, match=rf"^{re.escape(key)}: (inf|nan) is not a finite number"):
        config_check.check(overlay)


SHAPE = {"seq_len": 2, "input_size": 2, "hidden_size": 2}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (4.0, "4.0 is not of type 'integer', 'array'"),
        (10**30, "1000000000000000000000000000000 is greater than the maximum of 1000000000"),
        ([4, 8.0], "8.0 is not of type 'integer'"),
    ],
)
def test_a_size_is_a_whole_number_of_sensible_size(value, message):
    """`batch: 4.0` passed the check and broke the DAG (paths b4.0-... no rule makes), a huge
    integer gave PeriodicWildcardError (issue 23, item 12)."""
    entry = {"variants": ["numpy-lstm-naive"], "shapes": [SHAPE | {"batch": value}]}
    with pytest.raises(
        UserError, match=rf"^profile\[0\]\.shapes\[0\]\.batch.*{re.escape(message)}"
    ):
        config_check.check({"profile": [entry]})
    with pytest.raises(UserError, match=r"^train\.steps: 3\.0 is not of type 'integer'"):
        config_check.check({"train": {"steps": 3.0}})
