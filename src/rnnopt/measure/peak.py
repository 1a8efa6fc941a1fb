"""The measured GEMM ceiling: GFLOP/s of a square matrix product per library and dtype.

Cases: numpy's BLAS (float64, float32), torch on CPU (float64, float32, bfloat16) and torch
on CUDA (float64, float32 with TF32 off, tfloat32 = float32 with TF32 on, float16, bfloat16).
The roofline a recurrent layer is judged against is the host's ceiling for its dtype: the best
of these that any library reached (`ceiling_of`), not its own library's: oneDNN's LSTM GEMMs
can beat torch's `mm`, and a per-library ceiling then reads above 100%.

A product of two N x N matrices is 2*N^3 FLOPs; it writes into a preallocated output so that
allocation is not timed; each case runs at every size of `sizes` and in every operand layout
of `LAYOUTS`, and keeps its best (small products under-use wide vector units, large ones spill
caches; a layout can take a library's slow path). Metric keys: `gemm_gflops.<library>.<dtype>`
and `gemm_time_ms.<library>.<dtype>` (the median of the best size and layout),
`gemm_size` and `gemm_layout` of that best, library in {numpy, torch, cuda}.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

from rnnopt.measure.host import cpuinfo_fields, host_cpuinfo
from rnnopt.measure.timing import benchmark, timer_for

CPU_CASES = (
    ("numpy", "float64"),
    ("numpy", "float32"),
    ("torch", "float64"),
    ("torch", "float32"),
    ("torch", "bfloat16"),
)
CUDA_CASES = tuple(
    ("cuda", dtype) for dtype in ("float64", "float32", "tfloat32", "float16", "bfloat16")
)


# Operand layouts of out = A @ B: "nn" both row-major, "nt" B and "tn" A a transposed view.
# A BLAS takes either through a flag, but a library need not run them equally fast: torch's
# bfloat16 mm emulated on AVX2 ran 0.95 GFLOP/s as nn, 10 as nt and 24 as tn (N=1024, one
# thread; float32 88-94 in all three). nn.Linear and the RNN layers multiply by transposed
# weights, so the nn layout alone under-states the ceiling and a recurrent layer beats it.
LAYOUTS = ("nn", "nt", "tn")


def gemm_flops(size: int) -> int:
    return 2 * size**3


def gemm_call(
    library: str, dtype: str, size: int, layout: str = "nn", seed: int = 0
) -> tuple[Callable, Callable]:
    """(call, sync) computing out = a @ b for two random size x size matrices, each operand
    a transposed view of a row-major matrix where `layout` says t (LAYOUTS)."""
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((2, size, size))
    transpose_a, transpose_b = (flag == "t" for flag in layout)
    if library == "numpy":
        a, b = a.astype(dtype), b.astype(dtype)
        a, b = (a.T if transpose_a else a), (b.T if transpose_b else b)
        out = np.empty((size, size), dtype)
        return (lambda: np.matmul(a, b, out=out)), (lambda: None)
    import torch

    device = "cuda" if library == "cuda" else "cpu"
    torch_dtype = getattr(torch, "float32" if dtype == "tfloat32" else dtype)
    ta, tb = (torch.from_numpy(m).to(device, torch_dtype) for m in (a, b))
    ta, tb = (ta.t() if transpose_a else ta), (tb.t() if transpose_b else tb)
    out = torch.empty(size, size, dtype=torch_dtype, device=device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    if library != "cuda":
        return (lambda: torch.mm(ta, tb, out=out)), sync
    from rnnopt.models.variants.torch_base import set_fp32_precision

    tf32 = dtype == "tfloat32"

    def call() -> None:
        # The precision is process-global: set per call so each case measures what it names.
        set_fp32_precision(tf32)
        torch.mm(ta, tb, out=out)

    return call, sync


def measure_gemm(
    library: str, dtype: str, size: int, min_time_s: float = 0.5, layout: str = "nn"
) -> dict:
    """{"gflops", "time_ms", "calls"} of one case by the timing protocol (median time).

    A case whose first product alone outlasts `min_time_s` (bfloat16 emulated on a CPU
    without AVX-512 BF16 takes seconds per 1024^3 product) keeps that first call's time: its
    one-time costs (allocation, a oneDNN primitive: milliseconds) are well under 1% of it, and
    a case far from any ceiling that matters must not hold the pipeline for a minute.
    """
    call, sync = gemm_call(library, dtype, size, layout)
    device = "cuda" if library == "cuda" else "cpu"
    timer = timer_for(device)
    first_ms = timer(call, sync) / 1e6
    if first_ms / 1e3 > min_time_s:
        median_ms, calls = first_ms, 1
    else:
        metrics = benchmark(
            call, sync=sync, device=device, min_time_s=min_time_s, min_calls=3, max_warmup_calls=3
        )
        median_ms, calls = metrics["time_ms"]["median"], metrics["time_ms"]["n"]
    return {
        "gflops": gemm_flops(size) / (median_ms / 1e3) / 1e9,
        "time_ms": median_ms,
        "calls": calls,
    }


def ceiling_of(peak_record: dict, device: str, dtype: str) -> dict | None:
    """The host's GEMM ceiling for (device, dtype) in a peak record: the best GFLOP/s that any
    library reached there ({"gflops", "library", "dtype"}), or None when none was measured.

    On CPU numpy's BLAS and torch (MKL / oneDNN) compete; on CUDA the GPU's own GEMM (float32
    with TF32 off, so that IEEE float32 variants are not judged against TF32 tensor cores).
    """
    gflops = peak_record.get("metrics", {}).get("gemm_gflops", {})
    libraries = ("cuda",) if device == "cuda" else ("numpy", "torch")
    reached = [
        (value, library)
        for library in libraries
        for value in [gflops.get(library, {}).get(dtype)]
        if isinstance(value, int | float)
    ]
    if not reached:
        return None
    best, library = max(reached)
    return {"gflops": best, "library": library, "dtype": dtype}


# The theoretical FMA peak of the CPU, shown beside the measured ceiling (never the roofline).
#
# peak GFLOP/s = threads x MHz x FMA pipes x 2 (an FMA is two FLOPs) x lanes, with lanes = the
# datapath width / the dtype's bits. The datapath is the widest vector ISA the CPU reports
# (/proc/cpuinfo flags: avx512f 512 bits, avx2 256, else 128), except on AMD before Zen 5
# (family < 0x1a), whose cores execute AVX-512 as two 256-bit halves. FMA_PIPES = 2: every
# x86 server core since Haswell / Zen 1 issues two vector FMAs per cycle. The frequency is
# /proc/cpuinfo's `cpu MHz`: in a VM that is the nominal (TSC) clock, so a boosting core can
# beat this "peak"; it is context, and the measured ceiling stays the reference.
FMA_PIPES = 2

DTYPE_BITS = {"float64": 64, "float32": 32}

ZEN5_FAMILY = 0x1A


def datapath_bits(fields: dict[str, str]) -> int:
    flags = set(fields.get("flags", "").split())
    if "avx512f" in flags:
        amd = fields.get("vendor_id") == "AuthenticAMD"
        family = int(fields.get("cpu family", "0") or 0)
        return 256 if amd and family < ZEN5_FAMILY else 512
    return 256 if "avx2" in flags else 128


def theoretical_gflops(threads: int, cpuinfo: str | None = None, cores: int | None = None) -> dict:
    """{"float64", "float32": GFLOP/s, "mhz", "datapath_bits", "fma_pipes", "cores"}; {} when
    unknown. Threads beyond the logical CPUs (`cores`, this host's by default) add no FMA
    units: the peak counts min(threads, cores)."""
    cores = os.cpu_count() or threads if cores is None else cores
    threads = min(threads, cores)
    cpuinfo = host_cpuinfo() if cpuinfo is None else cpuinfo
    if cpuinfo is None:
        return {}
    fields = cpuinfo_fields(cpuinfo)
    try:
        mhz = float(fields["cpu MHz"])
    except (KeyError, ValueError):
        return {}
    bits = datapath_bits(fields)
    per_cycle = {dtype: FMA_PIPES * 2 * bits // width for dtype, width in DTYPE_BITS.items()}
    return {
        **{dtype: threads * mhz * flops / 1e3 for dtype, flops in per_cycle.items()},
        "mhz": mhz,
        "datapath_bits": bits,
        "fma_pipes": FMA_PIPES,
        "cores_counted": threads,
    }
