"""numba kernels of the gate arithmetic: one pass over a step's (G*H, B) block, no temporaries.

Layout is feature-major, as the variant's GEMMs leave it: a workspace is (rows, T*B) with step
t in columns t*B .. t*B + B - 1, so each hidden unit's B values are contiguous and the inner
loop over the batch vectorises. Kernels take whole workspaces, the step t and a range of hidden
units j0 .. j1 - 1 (all of them for the numba rung, one thread's for the persistent rung), never
slices: numba then compiles for C-contiguous arrays and knows the inner stride. Row and column
indices are unsigned: a signed index gets numba's negative-index wraparound, which hides from
LLVM that a read and a write of the same array hit the same element, and the loop stays scalar
(a signed row index alone made the LSTM forward kernel 1.6x slower, measured).

Each kernel comes in two flavours from one source (`Kernels`): "serial", a plain `njit`, and
"parallel", whose outer loop over hidden units (`prange`) numba splits over its threads. A
parallel launch hands the loop to a sleeping pool thread and waits for it; at the small shape
that cost 100 us against 5 us for the serial forward, and how much depended on whether the
other core was awake (measured). `kernels_for` picks serial at 1 thread, parallel above.

What a plain `njit` loop needs to vectorise (numba compiles parfor bodies with the first):
- error_model="numpy": numba's default checks every division for a zero divisor, a branch out
  of the loop that keeps it scalar;
- an array both read and written only at the same element (c, dc): LLVM hoists its runtime
  alias checks out of the loop over hidden units, so they compare whole blocks, and block t of
  an array overlaps its block t + 1: the check fails and the scalar loop runs (4-6x slower,
  measured). Hence the forward carries c_{t-1} in a (H, B) state rather than reading cs.

Activations: float32 uses a rational approximation of tanh (Eigen's, max error ~3e-7 on
[-7.9, 7.9], exact to float32 beyond by clamping) that LLVM vectorises; libm's tanhf would be
a scalar call per element (no SVML here). float64 uses math.tanh. sigmoid(z) =
(1 + tanh(z / 2)) / 2 in both, the overflow-free form of the other variants.

Every kernel takes `one`, 1 in the arrays' dtype, so that no literal promotes float32 to
float64. `cache=True`: compiled code goes to NUMBA_CACHE_DIR (or __pycache__), reruns load it.
"""

from __future__ import annotations

import math
from types import FunctionType
from typing import NamedTuple

import numba
import numpy as np
from numba import njit, prange, types, uint64
from numba.core.dispatcher import Dispatcher
from numba.extending import overload

# numba's OpenMP layer spin-waits after each parallel kernel while OpenBLAS's threads wait for
# the next GEMM: with 2 threads on 2 cores, forward took 2.5-3.8 s instead of 0.55 s (measured).
# The workqueue layer's threads sleep between kernels. Takes effect before the first launch.
numba.config.THREADING_LAYER = "workqueue"

# No nnan / ninf: saturated pre-activations must keep their IEEE limits.
FASTMATH = {"nsz", "arcp", "contract", "reassoc"}
TANH_CLAMP_F32 = np.float32(7.90531110763549805)  # beyond it tanh rounds to +-1 in float32
TANH_NUMERATOR_F32 = tuple(
    np.float32(c)
    for c in (
        -2.76076847742355e-16,
        2.00018790482477e-13,
        -8.60467152213735e-11,
        5.12229709037114e-08,
        1.48572235717979e-05,
        6.37261928875436e-04,
        4.89352455891786e-03,
    )
)
TANH_DENOMINATOR_F32 = tuple(
    np.float32(c)
    for c in (
        1.19825839466702e-06,
        1.18534705686654e-04,
        2.26843463243900e-03,
        4.89352518554385e-03,
    )
)


def gate_tanh(z):
    """tanh for kernels: the vectorisable rational form in float32, math.tanh in float64."""
    return math.tanh(z)


@overload(gate_tanh, inline="always")
def _gate_tanh(z):
    if isinstance(z, types.Float) and z.bitwidth == 32:
        n0, n1, n2, n3, n4, n5, n6 = TANH_NUMERATOR_F32
        d0, d1, d2, d3 = TANH_DENOMINATOR_F32
        clamp = TANH_CLAMP_F32

        def rational(z):
            x = min(max(z, -clamp), clamp)
            x2 = x * x
            p = ((((((n0 * x2 + n1) * x2 + n2) * x2 + n3) * x2 + n4) * x2 + n5) * x2 + n6) * x
            return p / (((d0 * x2 + d1) * x2 + d2) * x2 + d3)

        return rational
    return lambda z: math.tanh(z)


@njit(inline="always", fastmath=FASTMATH)
def _sigmoid(z, half):
    return half + half * gate_tanh(half * z)


def lstm_forward_step(pre, bias, recurrent, c, acts, cs, hs, t, j0, j1, one):
    """One LSTM step for hidden units j0 .. j1 - 1. pre (4H, T*B): input projection; bias
    (4H,): b_ih + b_hh, added here rather than in a pass of its own over pre; recurrent
    (4n, B), n = j1 - j0: W_hh h_{t-1} for those units, gate-major (row g*n + j - j0);
    c (H, B): c_{t-1} in, c_t out; writes the activations i, f, g, o to acts (4H, T*B) at
    step t's columns, c_t and h_t to cs, hs (H, (T+1)*B) at block t + 1."""
    H, B = uint64(c.shape[0]), uint64(recurrent.shape[1])
    n = uint64(j1 - j0)
    col = uint64(t) * B
    half = one / (one + one)
    for q in prange(n):
        r = uint64(q)
        j = uint64(j0) + r
        for b in range(B):
            i = _sigmoid(pre[j, col + b] + bias[j] + recurrent[r, b], half)
            f = _sigmoid(pre[H + j, col + b] + bias[H + j] + recurrent[n + r, b], half)
            g = gate_tanh(pre[2 * H + j, col + b] + bias[2 * H + j] + recurrent[2 * n + r, b])
            o = _sigmoid(pre[3 * H + j, col + b] + bias[3 * H + j] + recurrent[3 * n + r, b], half)
            c_t = f * c[j, b] + i * g
            acts[j, col + b] = i
            acts[H + j, col + b] = f
            acts[2 * H + j, col + b] = g
            acts[3 * H + j, col + b] = o
            c[j, b] = c_t
            cs[j, col + B + b] = c_t
            hs[j, col + B + b] = o * gate_tanh(c_t)


def lstm_backward_step(dz, dh, dc, grad_y, acts, cs, t, j0, j1, one):
    """Gate derivatives of LSTM step t for hidden units j0 .. j1 - 1. dh (n, B), n = j1 - j0:
    (W_hh^T dz_{t+1}) for those units (dL/dh_t but for grad_y); grad_y (B, T, H);
    dc (H, B): dL/dc_t through c_{t+1} in, dL/dc_{t-1} out; acts, cs as the forward left
    them. Writes dz (4H, T*B) at step t's columns."""
    H, B = uint64(dc.shape[0]), uint64(dh.shape[1])
    col = uint64(t) * B
    for q in prange(uint64(j1 - j0)):
        r = uint64(q)
        j = uint64(j0) + r
        for b in range(B):
            i, f = acts[j, col + b], acts[H + j, col + b]
            g, o = acts[2 * H + j, col + b], acts[3 * H + j, col + b]
            tanh_c = gate_tanh(cs[j, col + B + b])
            dh_total = dh[r, b] + grad_y[b, t, j]
            dc_total = dc[j, b] + dh_total * o * (one - tanh_c * tanh_c)
            dz[j, col + b] = dc_total * g * i * (one - i)
            dz[H + j, col + b] = dc_total * cs[j, col + b] * f * (one - f)
            dz[2 * H + j, col + b] = dc_total * i * (one - g * g)
            dz[3 * H + j, col + b] = dh_total * tanh_c * o * (one - o)
            dc[j, b] = dc_total * f


def rnn_forward_step(pre, bias, recurrent, hs, t, j0, j1):
    """h_t = tanh(x_t W_ih^T + bias + W_hh h_{t-1}) for hidden units j0 .. j1 - 1. pre
    (H, T*B) at step t's columns, bias (H,), recurrent (j1 - j0, B); writes hs (H, (T+1)*B)
    at block t + 1."""
    B = uint64(recurrent.shape[1])
    col = uint64(t) * B
    for q in prange(uint64(j1 - j0)):
        r = uint64(q)
        j = uint64(j0) + r
        for b in range(B):
            hs[j, col + B + b] = gate_tanh(pre[j, col + b] + bias[j] + recurrent[r, b])


def rnn_backward_step(dz, dh, grad_y, hs, t, j0, j1, one):
    """dz_t = (W_hh^T dz_{t+1} + grad_y_t) * (1 - h_t^2) for hidden units j0 .. j1 - 1;
    dh (j1 - j0, B), grad_y (B, T, H), hs (H, (T+1)*B) with h_t at block t + 1; writes
    dz (H, T*B) at step t's columns."""
    B = uint64(dh.shape[1])
    col = uint64(t) * B
    for q in prange(uint64(j1 - j0)):
        r = uint64(q)
        j = uint64(j0) + r
        for b in range(B):
            h = hs[j, col + B + b]
            dz[j, col + b] = (dh[r, b] + grad_y[b, t, j]) * (one - h * h)


class Kernels(NamedTuple):
    """One flavour of the kernels, compiled on first call."""

    flavour: str  # "serial" or "parallel"
    lstm_forward_step: Dispatcher
    lstm_backward_step: Dispatcher
    rnn_forward_step: Dispatcher
    rnn_backward_step: Dispatcher


def _compile_flavour(flavour: str) -> Kernels:
    # numba's disk cache names a kernel by its function's name and bytecode, not by the jit
    # options (numba issue 6845): each flavour compiles a copy under its own name, or one
    # flavour would load the other's cached code.
    kernels = []
    for kernel in (lstm_forward_step, lstm_backward_step, rnn_forward_step, rnn_backward_step):
        copy = FunctionType(kernel.__code__, kernel.__globals__, kernel.__name__)
        copy.__qualname__ = f"{kernel.__qualname__}_{flavour}"
        options = {"fastmath": FASTMATH, "error_model": "numpy", "cache": True, "nogil": True}
        kernels.append(njit(parallel=flavour == "parallel", **options)(copy))
    return Kernels(flavour, *kernels)


SERIAL = _compile_flavour("serial")
PARALLEL = _compile_flavour("parallel")


def kernels_for(threads: int | None = None) -> Kernels:
    """The flavour to run with `threads` numba threads (default: the count in force): serial
    at 1, parallel above."""
    if threads is None:
        threads = numba.get_num_threads()  # starts numba's pool, on the layer set above
    return SERIAL if threads == 1 else PARALLEL
