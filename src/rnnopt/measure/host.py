"""The host: the environment fingerprint every record carries, the hardware fingerprint that
names a run, and /proc/cpuinfo (the CPU model, native bfloat16)."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
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


def _model_name(fields: dict[str, str]) -> str:
    return fields.get("model name") or platform.processor() or platform.machine()


@functools.cache
def cpu_model() -> str:
    return _model_name(cpuinfo_fields(host_cpuinfo() or ""))


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


# x86 /proc/cpuinfo keys, then Arm's for the same thing.
CPUID_KEYS = {
    "vendor": ("vendor_id", "CPU implementer"),
    "family": ("cpu family", "CPU architecture"),
    "model": ("model", "CPU part"),
    "stepping": ("stepping", "CPU revision"),
}


def hardware_fingerprint(
    cpuinfo: str | None = None,
    cpu_count: int | None = None,
    gpu_names: list[str] | None = None,
) -> dict:
    """What the hardware is, never where it runs: the CPU's identity (vendor, family, model,
    stepping, model name), its flags (sorted), the logical CPU count and the GPU names.

    A hostname does not tell machines apart (every VM here is `vm`), nor does a container's
    image; the hardware does. Each argument defaults to this host's.
    """
    fields = cpuinfo_fields((host_cpuinfo() or "") if cpuinfo is None else cpuinfo)
    cpuid = {
        name: next((fields[k] for k in keys if k in fields), None)
        for name, keys in CPUID_KEYS.items()
    }
    flags = (fields.get("flags") or fields.get("Features") or "").split()
    return {
        **cpuid,
        "model_name": _model_name(fields),
        "flags": sorted(set(flags)),
        "cpu_count_logical": os.cpu_count() if cpu_count is None else cpu_count,
        "gpus": [gpu["name"] for gpu in nvidia_gpus()] if gpu_names is None else gpu_names,
    }


def hardware_id(hardware: dict | None = None) -> str:
    """8 hex digits of the hardware fingerprint (this host's by default)."""
    hardware = hardware_fingerprint() if hardware is None else hardware
    text = json.dumps(hardware, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def model_slug(name: str) -> str:
    """The model's name without trademarks, clock, core count and filler words:
    `Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz` -> `intel-xeon-platinum-8481c`."""
    noise = r"\((r|tm)\)|@.*|\b\d+-core\b|\b(cpu|processor)\b"
    return slug(re.sub(noise, " ", name, flags=re.IGNORECASE)) or "unknown"


def default_run_name(hardware: dict | None = None) -> str:
    """`cpu-<CPU model>-<hardware id>`, or `cuda-<GPU model>-<hardware id>` on a GPU host.

    Named from the hardware alone, so two machines never share a run, and a container runs
    under its host's name (the image stays in every record's env).
    """
    hardware = hardware_fingerprint() if hardware is None else hardware
    if hardware["gpus"]:
        return f"cuda-{model_slug(hardware['gpus'][0])}-{hardware_id(hardware)}"
    return f"cpu-{model_slug(hardware['model_name'])}-{hardware_id(hardware)}"


def cpu_mhz(cpuinfo: str | None = None) -> float | None:
    """The mean current clock of the logical CPUs (/proc/cpuinfo "cpu MHz"); None unknown."""
    cpuinfo = host_cpuinfo() if cpuinfo is None else cpuinfo
    clocks = [float(mhz) for mhz in re.findall(r"^cpu MHz\s*:\s*([\d.]+)", cpuinfo or "", re.M)]
    return round(sum(clocks) / len(clocks), 1) if clocks else None


GOVERNOR = Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")


def cpu_governor(path: Path = GOVERNOR) -> str | None:
    """cpu0's frequency governor (performance, powersave...); None where not exposed (VMs)."""
    try:
        return path.read_text().strip()
    except OSError:
        return None


def load_average() -> list[float] | None:
    """1, 5 and 15 minute load averages now: a loaded host times slower."""
    try:
        return list(os.getloadavg())
    except OSError:
        return None


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

    hardware = hardware_fingerprint()
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
        "hardware_id": hardware_id(hardware),
        **{key: hardware[key] for key in (*CPUID_KEYS, "flags")},
        "cpu_mhz": cpu_mhz(),
        "governor": cpu_governor(),
        "loadavg": load_average(),
    }
    if include_torch if include_torch is not None else "torch" in sys.modules:
        env["torch"] = torch_info()
    else:
        env["torch"] = {"version": installed_version("torch"), "imported": False}
    return env
