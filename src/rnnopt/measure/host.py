"""The host: the environment fingerprint every record carries, the default run name, and
/proc/cpuinfo read once (the CPU model, native bfloat16)."""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from rnnopt.measure.threads import THREAD_ENV_VARS

# The thread knobs rnnopt sets (rnnopt.measure.threads) and the BLAS settings that change its
# kernels: a record keeps each one's value.
RECORDED_ENV_VARS = (*THREAD_ENV_VARS, "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def host_cpuinfo() -> str | None:
    """This host's /proc/cpuinfo, or None where there is none."""
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return None


def cpuinfo_fields(text: str) -> dict[str, str]:
    """The first processor's `key: value` lines of /proc/cpuinfo."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


@functools.cache
def cpu_model() -> str:
    fields = cpuinfo_fields(host_cpuinfo() or "")
    return fields.get("model name") or platform.processor() or platform.machine()


# CPU flags of native bfloat16 arithmetic: x86 AVX-512 BF16 or AMX, Arm's BF16 extension
# (/proc/cpuinfo "Features" there). Without them oneDNN emulates bfloat16 in float32 with
# conversions: measured here 7x slower than float32 at the fastrnns shape on an AVX2 Zen 3.
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")


def native_bf16(cpuinfo: str | None = None) -> bool:
    """Whether the CPU reports bfloat16 arithmetic (NATIVE_BF16_FLAGS); False when unknown."""
    cpuinfo = host_cpuinfo() if cpuinfo is None else cpuinfo
    if cpuinfo is None:
        return False
    fields = cpuinfo_fields(cpuinfo)
    flags = set((fields.get("flags", "") + " " + fields.get("Features", "")).split())
    return any(flag in flags for flag in NATIVE_BF16_FLAGS)


def _run(*command: str) -> str | None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


@functools.cache
def git_state() -> dict:
    """Commit and dirty flag of the checkout in the working directory.

    RNNOPT_GIT_COMMIT, where set, names the commit instead: inside an image without .git (a
    build argument), or on a host that received a copy of the working tree with a stale .git
    (ci/gpu-run.sh).
    """
    named = os.environ.get("RNNOPT_GIT_COMMIT")
    if named:
        return {"commit": named, "dirty": None}
    commit = _run("git", "rev-parse", "HEAD")
    if commit is None:
        return {"commit": "unknown", "dirty": None}
    status = _run("git", "status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status)}


@functools.cache
def nvidia_gpus() -> list[dict]:
    """GPU name and driver from nvidia-smi, without importing torch."""
    if shutil.which("nvidia-smi") is None:
        return []
    out = _run("nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader")
    gpus = []
    for line in (out or "").splitlines():
        name, _, driver = line.partition(",")
        gpus.append({"name": name.strip(), "driver": driver.strip()})
    return gpus


@functools.cache
def cpu_caches() -> dict:
    """L1d / L2 / L3 bytes of one core (rnnopt.measure.caches): the C13 figure marks them."""
    from rnnopt.measure.caches import cache_sizes

    return cache_sizes()


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def default_run_name() -> str:
    """`<device>-<host>`: cuda-<gpu model> on a GPU host, else cpu-<hostname>.

    In a container the image tag replaces the hostname, which Docker randomises per run.
    """
    gpus = nvidia_gpus()
    host = os.environ.get("RNNOPT_IMAGE") or socket.gethostname()
    if gpus:
        return f"cuda-{slug(gpus[0]['name'])}-{slug(host)}"
    return f"cpu-{slug(host)}"


def installed_version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def torch_info() -> dict:
    import torch

    info = {
        "version": torch.__version__,
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "mkldnn": torch.backends.mkldnn.is_available(),
        "cuda_available": torch.cuda.is_available(),
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
    }
    if info["cuda_available"]:
        info["gpu_name"] = torch.cuda.get_device_name(0)
        info["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    return info


def blas_info() -> list[dict]:
    from threadpoolctl import threadpool_info

    keys = ("user_api", "internal_api", "version", "num_threads", "architecture", "filepath")
    return [{k: pool.get(k) for k in keys} for pool in threadpool_info()]


def fingerprint(include_torch: bool | None = None) -> dict:
    """Everything needed to say where and with what a number was measured.

    torch's runtime state (threads, CUDA, cuDNN) when this process imported it (or
    `include_torch`); otherwise only its installed version, read from the package metadata:
    a numpy-only measurement does not pay the two seconds of `import torch` for its record.
    """
    import numpy
    import psutil

    env = {
        "git": git_state(),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "blas": blas_info(),
        "thread_env": {name: os.environ.get(name) for name in RECORDED_ENV_VARS},
        "cpu_model": cpu_model(),
        "cpu_count_logical": os.cpu_count(),
        "cpu_count_physical": psutil.cpu_count(logical=False),
        "cpu_affinity": len(os.sched_getaffinity(0)),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "image": os.environ.get("RNNOPT_IMAGE"),
        "gpus": nvidia_gpus(),
        "cpu_caches": cpu_caches(),
    }
    if include_torch if include_torch is not None else "torch" in sys.modules:
        env["torch"] = torch_info()
    else:
        env["torch"] = {"version": installed_version("torch"), "imported": False}
    return env
