"""Measured memory bandwidth per level of the memory hierarchy: the roofline's slanted roofs.

Four STREAM-style kernels, compiled with numba (the project's kernel compiler) so that one
loop touches each element once, with no numpy temporaries: read (a sum), write (a fill), copy
(b = a) and triad (a = b + s*c). Each runs on a working set sized for one level, from the
host's cache sizes (rnnopt.measure.caches): half of L1d and half of L2 per thread, half of the
shared L3, and DRAM at four times L3 (at least 256 MiB). Each thread sweeps its own contiguous
chunk `reps` times inside one compiled call, so that neither Python's call overhead nor a
thread launch (one per call) lands in the time of a kernel that takes microseconds; one thread
runs the serial build (numba's parallel launch wakes a sleeping worker, rnnopt issue 24).

Bytes are counted as STREAM counts them: each array the kernel names, once per element
(read 1, write 1, copy 2, triad 3 arrays), not the write-allocate reads a cache adds. The roof
of a level is the best kernel there (`roofs`), as the GEMM ceiling is the best library.
On a GPU: device memory only, copy and triad with torch (L2 is not measured).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rnnopt.measure.timing import benchmark

KERNELS = ("read", "write", "copy", "triad")
ARRAYS = {"read": 1, "write": 1, "copy": 2, "triad": 3}
LEVELS = ("l1d", "l2", "l3", "dram")
DRAM_MIN_BYTES = 256 * 2**20
# Bytes one timed call moves at least (reps of the working set): 16 MiB keeps Python's call
# overhead (~1 us) under 0.1% at 100 GB/s.
BYTES_PER_CALL = 16 * 2**20
ITEMSIZE = 8  # float64 elements


def working_sets(caches: dict, threads: int) -> dict[str, int]:
    """level -> bytes of all arrays of one kernel call, for the levels whose size is known:
    private levels per thread, the shared L3 and DRAM for all threads together."""
    sets = {}
    for level in ("l1d", "l2"):
        if caches.get(level):
            sets[level] = threads * caches[level] // 2
    if caches.get("l3"):
        sets["l3"] = caches["l3"] // 2
    sets["dram"] = max(4 * caches.get("l3", 0), DRAM_MIN_BYTES)
    return sets


def _kernels(parallel: bool) -> dict[str, Callable]:
    """The four kernels, serial or parallel. Each thread's chunk goes to a helper whose loop
    starts at 0 over a slice: with an index numba cannot prove non-negative (a chunk's
    start), LLVM keeps the wraparound check and does not vectorise (22 GB/s read in L1 here,
    107 with the helper)."""
    import numba

    helper = numba.njit(fastmath=True, inline="always")

    @helper
    def sweep_read(part, reps):
        total = 0.0
        for _ in range(reps):
            for i in range(part.size):
                total += part[i]
        return total

    @helper
    def sweep_write(part, reps, value):
        for r in range(reps):
            fill = value + r  # a different value per sweep: no sweep is a dead store
            for i in range(part.size):
                part[i] = fill

    @helper
    def sweep_copy(src, dst, reps):
        for _ in range(reps):
            for i in range(src.size):
                dst[i] = src[i]

    @helper
    def sweep_triad(a, b, c, scalar, reps):
        for _ in range(reps):
            for i in range(a.size):
                a[i] = b[i] + scalar * c[i]

    def read(a, chunks, reps, sums):
        n = a.size
        for t in numba.prange(chunks):
            sums[t] = sweep_read(a[t * n // chunks : (t + 1) * n // chunks], reps)

    def write(a, chunks, reps, value):
        n = a.size
        for t in numba.prange(chunks):
            sweep_write(a[t * n // chunks : (t + 1) * n // chunks], reps, value)

    def copy(a, b, chunks, reps):
        n = a.size
        for t in numba.prange(chunks):
            lo, hi = t * n // chunks, (t + 1) * n // chunks
            sweep_copy(a[lo:hi], b[lo:hi], reps)

    def triad(a, b, c, scalar, chunks, reps):
        n = a.size
        for t in numba.prange(chunks):
            lo, hi = t * n // chunks, (t + 1) * n // chunks
            sweep_triad(a[lo:hi], b[lo:hi], c[lo:hi], scalar, reps)

    compile_ = numba.njit(parallel=parallel, fastmath=True, nogil=True)
    return {name: compile_(f) for name, f in zip(KERNELS, (read, write, copy, triad), strict=True)}


_COMPILED: dict[bool, dict[str, Callable]] = {}


def kernel_call(kernel: str, total_bytes: int, threads: int) -> tuple[Callable, int]:
    """(call, bytes one call moves) of `kernel` over arrays of `total_bytes` in all."""
    parallel = threads > 1
    kernels = _COMPILED.setdefault(parallel, _kernels(parallel))
    n = max(total_bytes // (ARRAYS[kernel] * ITEMSIZE), threads)
    arrays = [np.full(n, 1.0 + k) for k in range(ARRAYS[kernel])]
    reps = max(1, BYTES_PER_CALL // (n * ITEMSIZE * ARRAYS[kernel]))
    run = kernels[kernel]
    if kernel == "read":
        sums = np.zeros(threads)
        call = lambda: run(arrays[0], threads, reps, sums)  # noqa: E731
    elif kernel == "write":
        call = lambda: run(arrays[0], threads, reps, 0.5)  # noqa: E731
    elif kernel == "copy":
        call = lambda: run(arrays[0], arrays[1], threads, reps)  # noqa: E731
    else:
        call = lambda: run(*arrays, 0.5, threads, reps)  # noqa: E731
    call()  # compile (or load from the cache) outside the timing
    return call, reps * n * ITEMSIZE * ARRAYS[kernel]


def measure_level(kernel: str, total_bytes: int, threads: int, min_time_s: float) -> dict:
    """{"gbs", "time_ms", "bytes"} of one kernel at one working-set size (median call)."""
    call, moved = kernel_call(kernel, total_bytes, threads)
    metrics = benchmark(call, min_time_s=min_time_s, min_calls=3, max_warmup_calls=3)
    median_ms = metrics["time_ms"]["median"]
    return {"gbs": moved / (median_ms / 1e3) / 1e9, "time_ms": median_ms, "bytes": total_bytes}


def measure_cpu(caches: dict, threads: int, min_time_s: float = 0.05, log=print) -> dict:
    """{"gbs": {level: {kernel: GB/s}}, "working_set_bytes": {level: bytes}, "kernel_compiler"}."""
    import numba

    numba.set_num_threads(threads) if threads > 1 else None
    gbs: dict[str, dict[str, float]] = {}
    sets = working_sets(caches, threads)
    for level, size in sets.items():
        for kernel in KERNELS:
            result = measure_level(kernel, size, threads, min_time_s)
            gbs.setdefault(level, {})[kernel] = result["gbs"]
            log(f"rnnopt peak: bandwidth {level} ({size / 2**10:.0f} KiB) {kernel}: "
                f"{result['gbs']:.1f} GB/s")  # fmt: skip
    return {"gbs": gbs, "working_set_bytes": sets, "kernel_compiler": f"numba {numba.__version__}"}


def measure_cuda(total_bytes: int = 2**30, min_time_s: float = 0.2) -> dict:
    """Device-memory bandwidth of the GPU: torch copy and triad over `total_bytes` in all."""
    gbs = {kernel: cuda_kernel_gbs(kernel, total_bytes, min_time_s) for kernel in ("copy", "triad")}
    return {"gbs": {"dram": gbs}, "working_set_bytes": {"dram": total_bytes}}


def cuda_kernel_gbs(kernel: str, total_bytes: int, min_time_s: float) -> float:
    import torch

    n = total_bytes // (ARRAYS[kernel] * 4)
    a, b, c = (torch.full((n,), 1.0 + k, device="cuda") for k in range(3))

    def call():
        return b.copy_(a) if kernel == "copy" else torch.add(b, c, alpha=0.5, out=a)

    metrics = benchmark(call, sync=torch.cuda.synchronize, device="cuda", min_time_s=min_time_s)
    return n * 4 * ARRAYS[kernel] / (metrics["time_ms"]["median"] / 1e3) / 1e9


def roofs(bandwidth: dict) -> dict[str, float]:
    """level -> the best GB/s any kernel reached there (the level's roof)."""
    return {
        level: max(values.values())
        for level, values in (bandwidth or {}).items()
        if isinstance(values, dict) and values
    }
