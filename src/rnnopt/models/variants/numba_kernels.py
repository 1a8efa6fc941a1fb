"""numba kernels of the gate arithmetic: one pass over a step's (G*H, B) block, no temporaries.

Layout is feature-major, as the variant's GEMMs leave it: a workspace is (rows, T*B) with step
t in columns t*B .. t*B + B - 1, so each hidden unit's B values are contiguous and the inner
loop over the batch vectorises. The outer loop over hidden units runs in parallel (`prange`;
the batch is the vectorised inner loop). Only these parfor loops vectorised here: the same
loops in a plain `njit` stayed scalar (measured), so kernels are parallel even at 1 thread.
Kernels take whole workspaces and the step t, never slices: numba then compiles for
C-contiguous arrays and knows the inner stride. Column indices are unsigned: a signed index
gets numba's negative-index wraparound, which hides from LLVM that a read and a write of the
same array hit the same element, and the loop stays scalar. Outputs never share an array
with inputs: in place, the vectorised loop did not run (8x slower, measured).

Activations: float32 uses a rational approximation of tanh (Eigen's, max error ~3e-7 on
[-7.9, 7.9], exact to float32 beyond by clamping) that LLVM vectorises; libm's tanhf would be
a scalar call per element (no SVML here). float64 uses math.tanh. sigmoid(z) =
(1 + tanh(z / 2)) / 2 in both, the overflow-free form of the other variants.

Every kernel takes `one`, 1 in the arrays' dtype, so that no literal promotes float32 to
float64. `cache=True`: compiled code goes to NUMBA_CACHE_DIR (or __pycache__), reruns load it.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import njit, prange, types, uint64
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


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def lstm_forward_step(pre, recurrent, acts, cs, hs, t, one):
    """One LSTM step. pre (4H, T*B): input projection with the bias folded in; recurrent
    (4H, B): W_hh h_{t-1}; writes the activations i, f, g, o to acts (4H, T*B) at step t's
    columns; cs, hs (H, (T+1)*B): reads c_{t-1} at block t, writes c_t, h_t at block t + 1."""
    H, B = recurrent.shape[0] // 4, uint64(recurrent.shape[1])
    col = uint64(t) * B
    half = one / (one + one)
    for j in prange(H):
        for b in range(B):
            i = _sigmoid(pre[j, col + b] + recurrent[j, b], half)
            f = _sigmoid(pre[H + j, col + b] + recurrent[H + j, b], half)
            g = gate_tanh(pre[2 * H + j, col + b] + recurrent[2 * H + j, b])
            o = _sigmoid(pre[3 * H + j, col + b] + recurrent[3 * H + j, b], half)
            c = f * cs[j, col + b] + i * g
            acts[j, col + b] = i
            acts[H + j, col + b] = f
            acts[2 * H + j, col + b] = g
            acts[3 * H + j, col + b] = o
            cs[j, col + B + b] = c
            hs[j, col + B + b] = o * gate_tanh(c)


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def lstm_backward_step(dz, dh, dc, grad_y, acts, cs, t, one):
    """Gate derivatives of LSTM step t. dh (H, B): W_hh^T dz_{t+1} (dL/dh_t but for grad_y);
    grad_y (B, T, H); dc (H, B): dL/dc_t through c_{t+1} in, dL/dc_{t-1} out; acts, cs as
    the forward left them. Writes dz (4H, T*B) at step t's columns."""
    H, B = dh.shape[0], uint64(dh.shape[1])
    col = uint64(t) * B
    for j in prange(H):
        for b in range(B):
            i, f = acts[j, col + b], acts[H + j, col + b]
            g, o = acts[2 * H + j, col + b], acts[3 * H + j, col + b]
            tanh_c = gate_tanh(cs[j, col + B + b])
            dh_total = dh[j, b] + grad_y[b, t, j]
            dc_total = dc[j, b] + dh_total * o * (one - tanh_c * tanh_c)
            dz[j, col + b] = dc_total * g * i * (one - i)
            dz[H + j, col + b] = dc_total * cs[j, col + b] * f * (one - f)
            dz[2 * H + j, col + b] = dc_total * i * (one - g * g)
            dz[3 * H + j, col + b] = dh_total * tanh_c * o * (one - o)
            dc[j, b] = dc_total * f


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def rnn_forward_step(pre, recurrent, hs, t):
    """h_t = tanh(pre-activation + W_hh h_{t-1}). pre (H, T*B) at step t's columns,
    recurrent (H, B); writes hs (H, (T+1)*B) at block t + 1."""
    H, B = recurrent.shape[0], uint64(recurrent.shape[1])
    col = uint64(t) * B
    for j in prange(H):
        for b in range(B):
            hs[j, col + B + b] = gate_tanh(pre[j, col + b] + recurrent[j, b])


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def rnn_backward_step(dz, dh, grad_y, hs, t, one):
    """dz_t = (W_hh^T dz_{t+1} + grad_y_t) * (1 - h_t^2); dh (H, B), grad_y (B, T, H),
    hs (H, (T+1)*B) with h_t at block t + 1; writes dz (H, T*B) at step t's columns."""
    H, B = dh.shape[0], uint64(dh.shape[1])
    col = uint64(t) * B
    for j in prange(H):
        for b in range(B):
            h = hs[j, col + B + b]
            dz[j, col + b] = (dh[j, b] + grad_y[b, t, j]) * (one - h * h)
