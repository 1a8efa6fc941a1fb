"""What each job asks of a cluster scheduler: memory (mem_mb), wall time (runtime, minutes)
and GPUs, from the job's wildcards and the config.

A local `snakemake --cores all` only schedules by threads; these matter under a scheduler (the
SLURM profile turns them into --mem, --time and --gpus; docs/slurm.md). A rule without a
resources block gets the profile's default-resources. Memory follows the analytic model of
rnnopt.models.flops.memory_model where the job has a shape; wall time follows its FLOP count at a
pessimistic rate. The constants are upper bounds, not tuned to one host.
"""

import math
import os
from types import SimpleNamespace

from rnnopt.models.flops import Shape, flop_count, memory_model

MIB = 2**20
# Resident memory of a job before it computes, MiB: SLURM's MaxRSS of a job step (the
# Snakemake process that runs the job on the node plus `python -m rnnopt` with numpy and torch
# imported; the 45 MiB parent of `rnnopt --isolate` came later) was 400-510 MiB at the ci
# config's shapes; doubled.
JOB_BASE_MEM_MB = 1000
# torch.compile's compiler on top (inductor and its workers): job steps of compiled variants
# reached 880 MiB at the ci config's shapes.
COMPILE_MEM_MB = 1000
# Measured peaks against the analytic memory model: up to about 3.5x (nn.LSTM's oneDNN
# workspace at the fastrnns shape); the naive loops' temporaries and memray's own tracking on top.
MODEL_HEADROOM = 4
# Start-up of a job (Snakemake, imports, the GEMM peak at its sizes): minutes.
JOB_BASE_RUNTIME_MIN = 5
# torch.compile of a cell: 30-130 s per shape measured here; a slower node gets its margin.
COMPILE_RUNTIME_MIN = 10
# Pessimistic rates, GFLOP/s: the per-sequence and per-operation Python loops (naive,
# in-place, tape) reached about 0.9 at the default anchor shape, every GEMM-bound variant at
# least 2.4 there and tens at the fastrnns shape.
LOOP_KINDS = ("naive", "inplace", "tape")
LOOP_GFLOPS = 0.5
GEMM_GFLOPS = 5.0
# Calls of a measurement, each counted as a full step (a backward follows an untimed forward):
# per phase the first, up to 10 warm-up and at least 10 timed calls; a profile job times all
# three phases.
CALLS_PER_MEASUREMENT = 80
# GPUs a job on the cuda device asks for; RNNOPT_CUDA_JOB_GPUS=0 runs those jobs on CPU nodes
# (where they write `skipped` records) on a cluster without GPUs.
CUDA_JOB_GPUS = int(os.environ.get("RNNOPT_CUDA_JOB_GPUS", "1"))
SHAPE_WILDCARDS = ("batch", "seq_len", "input_size", "hidden_size")


def job_shape(wildcards) -> Shape | None:
    """The (B, T, I, H) a job computes at: its shape wildcards, or the training settings for
    a train job (inputs counted at the hidden size: the tasks have fewer features); else None."""
    if all(hasattr(wildcards, name) for name in SHAPE_WILDCARDS):
        return Shape(*(int(getattr(wildcards, name)) for name in SHAPE_WILDCARDS))
    if hasattr(wildcards, "setting") and wildcards.setting in TRAIN_SETTINGS:
        hidden = config["train"]["hidden_size"]
        batch = TRAIN_SETTINGS[wildcards.setting]["batch"]
        return Shape(batch, config["datasets"]["seq_len"], hidden, hidden)
    return None


def job_cell(wildcards) -> str:
    """tanh RNN or LSTM, from the variant name (<framework>-<cell>-<kind>); LSTM if none."""
    return wildcards.variant.split("-")[1] if hasattr(wildcards, "variant") else "lstm"


def job_dtype(wildcards) -> str:
    return getattr(wildcards, "dtype", "float64")


def job_mem_mb(wildcards) -> int:
    """--mem of a job, MiB: the base resident memory (more for torch.compile) plus
    MODEL_HEADROOM times everything the analytic model counts for one training step (inputs,
    parameters, gradients, outputs, the activations BPTT keeps) at the job's shape and dtype."""
    base_mb = JOB_BASE_MEM_MB
    if "compile" in getattr(wildcards, "variant", ""):
        base_mb += COMPILE_MEM_MB
    shape = job_shape(wildcards)
    if shape is None:
        return base_mb
    model = memory_model(job_cell(wildcards), shape, job_dtype(wildcards), "step")
    model_bytes = sum(value for key, value in model.items() if key != "minimum_bytes")
    return base_mb + math.ceil(MODEL_HEADROOM * model_bytes / MIB)


def job_runtime_min(wildcards) -> int:
    """--time of a job, minutes: start-up, compilation for compiled variants, and its calls
    (CALLS_PER_MEASUREMENT, plus the training steps) of a full step at LOOP_GFLOPS for the
    Python loops, GEMM_GFLOPS for the rest."""
    minutes = JOB_BASE_RUNTIME_MIN
    if "compile" in getattr(wildcards, "variant", ""):
        minutes += COMPILE_RUNTIME_MIN
    shape = job_shape(wildcards)
    if shape is not None:
        calls = CALLS_PER_MEASUREMENT
        if hasattr(wildcards, "setting"):
            key = config_check.train_job_key(wildcards)
            calls += TRAIN_STEPS.get(key, config["train"]["steps"])
        step_flops = flop_count(job_cell(wildcards), shape, "step")["total"]
        kind = getattr(wildcards, "variant", "").rsplit("-", 1)[-1]
        gflops = LOOP_GFLOPS if kind in LOOP_KINDS else GEMM_GFLOPS
        minutes += math.ceil(calls * step_flops / (gflops * 1e9) / 60)
    return minutes


def job_gpus(wildcards) -> int:
    """GPUs of a job: CUDA_JOB_GPUS on the cuda device, none otherwise."""
    return CUDA_JOB_GPUS if getattr(wildcards, "device", "cpu") == "cuda" else 0




def verify_resource(resource, combine, device: str) -> int:
    """A resource of the verify job of `device`, combined over its records as if each were a
    job of its own."""
    jobs = [job for job in VERIFY_JOBS if job["device"] == device]
    return combine(resource(SimpleNamespace(**job)) for job in jobs)


def verify_runtime_min(device: str) -> int:
    """--time of the verify job of `device`: one start-up, and each record's own minutes."""
    extra = verify_resource(lambda job: job_runtime_min(job) - JOB_BASE_RUNTIME_MIN, sum, device)
    return JOB_BASE_RUNTIME_MIN + extra

def topup_mem_mb(wildcards) -> int:
    """--mem of the top-up: the most any profile job of the run asks (it runs them again)."""
    asks = [job_mem_mb(SimpleNamespace(**job)) for job in PROFILE_JOBS]
    return max(asks, default=JOB_BASE_MEM_MB)


def topup_runtime_min(wildcards) -> int:
    """--time of the top-up: its budget, plus the longest profile job (one may start at the
    budget's end)."""
    longest = max((job_runtime_min(SimpleNamespace(**job)) for job in PROFILE_JOBS), default=0)
    return JOB_BASE_RUNTIME_MIN + math.ceil(config["timing"]["topup_budget_s"] / 60) + longest
