"""Thread settings of a measurement process: set once, before any work, and recorded.

Three knobs, because three runtimes own threads here:

- environment (`OMP_NUM_THREADS`, `MKL_NUM_THREADS`, `OPENBLAS_NUM_THREADS`,
  `NUMBA_NUM_THREADS`): read by a library only when it loads, so setting them helps only
  libraries loaded afterwards and child processes. numpy's OpenBLAS is loaded already by
  `import rnnopt`, hence the other two knobs; numba loads later, with the numba variants only,
  and sizes its pool from the environment (or `numba.set_num_threads` if already loaded);
- `torch.set_num_threads(n)`: torch's intra-op pool (OpenMP, MKL, oneDNN);
- threadpoolctl `threadpool_limits(n)`: every BLAS / OpenMP pool loaded in the process (numpy's
  OpenBLAS, torch's libgomp), changed at run time through each library's own API.

torch's inter-op pool is left alone: it can be sized only before its first use, and the
variants here run no inter-op parallel work.
"""

from __future__ import annotations

import os
import sys

from rnnopt.errors import UserError

THREAD_ENV_VARS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMBA_NUM_THREADS",
)


def set_thread_env(threads: int) -> None:
    """Export the thread count for libraries loaded from now on (and child processes).

    NUMBA_NUM_THREADS is left alone once numba is loaded: numba rereads it at every compile
    and raises if it no longer matches the pool it launched (set_num_threads sizes that)."""
    if threads < 1:
        raise UserError(f"threads must be >= 1, got {threads}")
    for name in THREAD_ENV_VARS:
        if name == "NUMBA_NUM_THREADS" and "numba" in sys.modules:
            continue
        os.environ[name] = str(threads)


def apply_threads(threads: int, use_torch: bool = True) -> dict:
    """Set every thread knob to `threads` and return what took effect (`effective_threads`).

    Call first thing in a measurement process, before the work whose threads it fixes.
    """
    from threadpoolctl import threadpool_limits

    set_thread_env(threads)
    if use_torch:
        import torch  # loaded before threadpoolctl looks, so its OpenMP pool is limited too

        torch.set_num_threads(threads)
    # The limits stay in force: only the context-manager exit or restore_original_limits()
    # would undo them, and neither is called.
    threadpool_limits(limits=threads)
    if "numba" in sys.modules:  # importing it here would cost every process half a second
        numba = sys.modules["numba"]
        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    return effective_threads(threads)


def effective_threads(requested: int | None = None) -> dict:
    """The thread counts in force now: requested, torch's pools, numba's (once loaded), each
    BLAS/OpenMP pool, env."""
    from threadpoolctl import threadpool_info

    info: dict = {"requested": requested}
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        info["torch"] = torch.get_num_threads()
        info["torch_interop"] = torch.get_num_interop_threads()
    if "numba" in sys.modules:
        info["numba"] = sys.modules["numba"].get_num_threads()
    info["pools"] = [
        {
            "user_api": pool.get("user_api"),
            "internal_api": pool.get("internal_api"),
            "num_threads": pool.get("num_threads"),
        }
        for pool in threadpool_info()
    ]
    info["env"] = {name: os.environ.get(name) for name in THREAD_ENV_VARS}
    return info


def threads_match(info: dict) -> bool:
    """True when torch, numba (if loaded) and every pool run the requested number of threads."""
    requested = info.get("requested")
    counts = [pool["num_threads"] for pool in info["pools"]]
    counts += [info[runtime] for runtime in ("torch", "numba") if runtime in info]
    return requested is None or all(count == requested for count in counts)
