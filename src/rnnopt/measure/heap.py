"""The headline memory instrument: heap bytes at the allocator level, the same for every
framework (memray on CPU: numpy's buffers, torch's CPU allocator and oneDNN's workspaces all
come from malloc / posix_memalign / mmap, which memray intercepts; torch.cuda's allocator
statistics on a GPU).

Protocol of `step_peak`, in one process:
1. Warm-up: a throwaway variant instance builds a runner and calls the phase twice. It pays
   what the libraries allocate once per process (OpenBLAS buffers, oneDNN primitive caches,
   thread pools, torch's lazy state); memray watches it and reports it apart
   (`warmup_peak_mib`, `warmup_kept_mib`).
2. Measured: a fresh variant instance (variants cache workspaces on themselves) builds a fresh
   runner and calls the phase once, all inside one memray window. `peak_mib` is the highest
   sum of live bytes allocated in the window, i.e. the peak above the heap before it;
   `kept_mib` what is still allocated when the call returns, with the runner alive: the bytes
   a runner keeps between steps (its converted inputs and weights, workspaces, gradients).

The runner is built inside the window so that workspaces count wherever a variant allocates
them (at construction or lazily on the first call); its native copies of the inputs and
weights count with them (`inputs_bytes + params_bytes` of the analytic model).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from rnnopt.measure.harness import make_inputs, phase_call
from rnnopt.measure.memory import MIB
from rnnopt.models.flops import Shape
from rnnopt.models.variants import get_variant, name_parts

WARMUP_CALLS = 2


def tracked(call: Callable[[], object]) -> tuple[dict, object]:
    """({"peak_bytes", "kept_bytes"}, call's result) of `call` under memray.

    peak_bytes: the high-water mark of bytes allocated inside the window and live at once;
    kept_bytes: bytes allocated inside the window and still live at its end (the result and
    whatever it references are alive then).
    """
    import memray

    with tempfile.TemporaryDirectory(prefix="rnnopt-memray-") as folder:
        capture = Path(folder, "capture.bin")
        with memray.Tracker(capture, file_format=memray.FileFormat.AGGREGATED_ALLOCATIONS):
            result = call()
        reader = memray.FileReader(capture)
        try:
            peak = reader.metadata.peak_memory
            kept = sum(r.size for r in reader.get_leaked_allocation_records(merge_threads=True))
        finally:
            reader.close()
    return {"peak_bytes": int(peak), "kept_bytes": int(kept)}, result


def _run_phase(runner, phase: str) -> None:
    """One call of the phase, as the timing harness makes it (backward after its forward)."""
    call, before = phase_call(runner, phase)
    if before is not None:
        before()
    call()
    runner.sync()


def step_peak_of(make_runner: Callable[[], object], phase: str, device: str = "cpu") -> dict:
    """The protocol on a runner factory (a fresh variant instance and runner per call).

    Returns peak_mib, kept_mib, warmup_peak_mib, warmup_kept_mib, library_buffers_mib and
    instrument.
    On CUDA: the torch.cuda allocator's peak above what was allocated before the fresh runner.
    """

    def warm_up() -> object:
        runner = make_runner()
        for _ in range(WARMUP_CALLS):
            _run_phase(runner, phase)
        return runner

    if device == "cuda":
        return _cuda_peak(make_runner, phase, warm_up())
    warmup, warm = tracked(warm_up)

    def measured() -> object:
        runner = make_runner()
        _run_phase(runner, phase)
        return runner  # alive at the window's end: what it keeps counts as kept

    heap, runner = tracked(measured)
    del runner, warm
    return {
        "instrument": "memray",
        "peak_mib": heap["peak_bytes"] / MIB,
        "kept_mib": heap["kept_bytes"] / MIB,
        "warmup_peak_mib": warmup["peak_bytes"] / MIB,
        "warmup_kept_mib": warmup["kept_bytes"] / MIB,
        # What the warm-up kept beyond what a runner keeps: the libraries' one-time buffers.
        "library_buffers_mib": max(warmup["kept_bytes"] - heap["kept_bytes"], 0) / MIB,
    }


def _cuda_peak(make_runner: Callable[[], object], phase: str, warm) -> dict:
    import torch

    torch.cuda.synchronize()
    del warm
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    runner = make_runner()
    _run_phase(runner, phase)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    kept = torch.cuda.memory_allocated() - before
    del runner
    return {
        "instrument": "torch.cuda",
        "peak_mib": peak / MIB,
        "kept_mib": kept / MIB,
        "warmup_peak_mib": None,
        "warmup_kept_mib": None,
        "library_buffers_mib": None,
    }


def step_peak(
    variant_name: str,
    dtype: str,
    device: str,
    shape: Shape,
    phase: str,
    seed: int = 0,
) -> dict:
    """Headline peak heap of one phase call of a fresh runner (see the module docstring).

    The float64 inputs (params, x (B, T, I), grad_y (B, T, H)) are made before any window;
    the runner's conversions of them are inside it. Raises what the variant raises.
    """
    _, cell, _ = name_parts(variant_name)
    params, x, grad_y = make_inputs(cell, shape, seed)

    def make_runner():
        variant = get_variant(variant_name, dtype=dtype, device=device)
        return variant.runner(params, x, grad_y, 1e-3)

    return step_peak_of(make_runner, phase, device)
