"""The persistent rung's time loops, one numba call per thread and phase, outside the GIL.

Each step of a thread: its GEMM slice (numpy's BLAS, rnnopt.models.variants.numpy_blas), its
units' gate arithmetic (the serial kernels of rnnopt.models.variants.numba_kernels), then the
team's spinning barrier (rnnopt.models.variants.spin_barrier). `gemm_on`, `elementwise` and
`meet` switch the three parts, for the time split (rnnopt.measure.split). A loop returns False
when the barrier reports that another thread failed.

Layouts are the numba rung's: workspaces (rows, T*B) with step t in columns t*B .. t*B + B - 1,
hs and cs (H, (T+1)*B) with h_t in block t + 1. A thread's operands: weights (G*n, H), its
units' rows of W_hh gate-major, and recurrent (G*n, B); or, backward, weights_t (n, G*H) =
W_hh[:, units]^T and dh (n, B); n = j1 - j0.
"""

from __future__ import annotations

from numba import njit

from rnnopt.models.variants.numba_kernels import SERIAL
from rnnopt.models.variants.numpy_blas import gemm
from rnnopt.models.variants.spin_barrier import wait

lstm_forward_step = SERIAL.lstm_forward_step
lstm_backward_step = SERIAL.lstm_backward_step
rnn_forward_step = SERIAL.rnn_forward_step
rnn_backward_step = SERIAL.rnn_backward_step


@njit(nogil=True, cache=True)
def forward_loop(
    pre, bias, weights, recurrent, c, acts, cs, hs, j0, j1, lstm, gemm_on, elementwise, meet,
    barrier, threads, one,
):  # fmt: skip
    H, B, rows = hs.shape[0], recurrent.shape[1], weights.shape[0]
    T = hs.shape[1] // B - 1
    for t in range(T):
        if t > 0 and gemm_on:  # recurrent = weights @ h_{t-1}
            h_prev = hs.ctypes.data + t * B * hs.itemsize
            gemm(weights.ctypes.data, H, h_prev, hs.shape[1], recurrent.ctypes.data, B,
                 rows, B, H, one)  # fmt: skip
        if elementwise:
            if lstm:
                lstm_forward_step(pre, bias, recurrent, c, acts, cs, hs, t, j0, j1, one)
            else:
                rnn_forward_step(pre, bias, recurrent, hs, t, j0, j1)
        if meet and not wait(barrier, threads):
            return False
    return True


@njit(nogil=True, cache=True)
def backward_loop(
    dz, weights_t, dh, dc, grad_y, acts, cs, hs, j0, j1, lstm, gemm_on, elementwise, meet,
    barrier, threads, one,
):  # fmt: skip
    GH, B, n = dz.shape[0], dh.shape[1], dh.shape[0]
    T = dz.shape[1] // B
    for t in range(T - 1, -1, -1):
        if t < T - 1 and gemm_on:  # dh = W_hh[:, units]^T @ dz_{t+1}
            dz_next = dz.ctypes.data + (t + 1) * B * dz.itemsize
            gemm(weights_t.ctypes.data, GH, dz_next, dz.shape[1], dh.ctypes.data, B,
                 n, B, GH, one)  # fmt: skip
        if elementwise:
            if lstm:
                lstm_backward_step(dz, dh, dc, grad_y, acts, cs, t, j0, j1, one)
            else:
                rnn_backward_step(dz, dh, grad_y, hs, t, j0, j1, one)
        if meet and not wait(barrier, threads):
            return False
    return True
