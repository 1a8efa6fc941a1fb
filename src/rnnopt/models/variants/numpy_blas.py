"""numpy's own BLAS GEMM, callable from numba-compiled code without the GIL.

The persistent rung runs each thread's whole time loop in one numba call: a Python loop would
take the GIL two or three times a step per thread, and at B=8 the hand-offs between two
threads cost more than the step's GEMM (measured: about 50 us a step, against a 40 us GEMM
slice). numba's own np.dot calls SciPy's copy of OpenBLAS through its Fortran interface, which
copies strided operands; here the rung calls the very library numpy's matmul calls (same GEMM
kernels as every other NumPy rung, under the same thread limits) with explicit leading
dimensions, so a step's column block of a (rows, T*B) workspace is an operand as it is.

numpy's wheels ship OpenBLAS with ILP64 integers and renamed symbols
(scipy_cblas_sgemm64_); other builds export plain cblas_sgemm. `gemm` resolves whichever
the loaded library has, once, and is a numba function: gemm(a, lda, b, ldb, c, ldc, m, n, k,
one) computes C (m, n) = A (m, k) @ B (k, n), row-major, C overwritten, with a,
b, c pointers (`array.ctypes.data` plus an offset) of arrays of one dtype (float32 or float64),
told by `one`, 1 in that dtype.
"""

from __future__ import annotations

import ctypes
import os
from functools import cache

import llvmlite.binding
import numpy as np
from numba import types
from numba.extending import overload

from rnnopt.errors import UnavailableError

ROW_MAJOR, NO_TRANS = 101, 111  # CBLAS enums
SYMBOL_PATTERNS = ("scipy_cblas_{}gemm64_", "cblas_{}gemm64_", "cblas_{}gemm")


@cache
def numpy_blas() -> tuple[str, str, bool]:
    """(library path, symbol pattern, ILP64) of the BLAS numpy's matmul calls; raises
    UnavailableError when numpy's BLAS cannot be found or exports no CBLAS GEMM."""
    from threadpoolctl import threadpool_info

    package = os.path.realpath(os.path.dirname(np.__file__))
    homes = (package + os.sep, package + ".libs" + os.sep)  # numpy/.dylibs, numpy.libs/
    for pool in threadpool_info():
        path = pool.get("filepath", "")
        if pool.get("user_api") != "blas" or not os.path.realpath(path).startswith(homes):
            continue
        library = ctypes.CDLL(path)
        for pattern in SYMBOL_PATTERNS:
            if hasattr(library, pattern.format("s")):
                return path, pattern, "64_" in pattern
    raise UnavailableError("numpy's BLAS exports no CBLAS sgemm/dgemm that numba can call")


def load() -> None:
    """Make numpy's BLAS symbols visible to numba's linker. Must run before a cached function
    that calls `gemm` loads: a cache hit skips the typing below, and with it the loading."""
    llvmlite.binding.load_library_permanently(numpy_blas()[0])


def _external(prefix: str, dtype) -> types.ExternalFunction:
    path, pattern, ilp64 = numpy_blas()
    load()
    integer = types.int64 if ilp64 else types.int32
    enum = types.int32
    return types.ExternalFunction(
        pattern.format(prefix),
        types.void(
            enum, enum, enum, integer, integer, integer,  # order, trans A, trans B, m, n, k
            dtype, types.intp, integer,  # alpha, A, lda
            types.intp, integer,  # B, ldb
            dtype, types.intp, integer,  # beta, C, ldc
        ),
    )  # fmt: skip


def gemm(a, lda, b, ldb, c, ldc, m, n, k, one):
    """C = A @ B; see the module docstring. Callable from numba-compiled code only."""
    raise NotImplementedError("rnnopt.models.variants.numpy_blas.gemm runs inside numba only")


@overload(gemm, inline="always")
def _gemm(a, lda, b, ldb, c, ldc, m, n, k, one):
    blas = _external("s", types.float32) if one.bitwidth == 32 else _external("d", types.float64)
    zero = np.float32(0) if one.bitwidth == 32 else np.float64(0)

    def call(a, lda, b, ldb, c, ldc, m, n, k, one):
        blas(ROW_MAJOR, NO_TRANS, NO_TRANS, m, n, k, one, a, lda, b, ldb, zero, c, ldc)

    return call
