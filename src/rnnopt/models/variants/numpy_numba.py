"""The fused variant's hoisted GEMMs, with each step's gate arithmetic as one numba pass.

The GEMMs stay NumPy/BLAS calls; what changes is the elementwise work between them. Where the
fused variant makes about seven NumPy passes over a step's (B, G*H) block (add, exp, add,
divide, state update...), each a round trip through cache with its own temporaries, a numba
kernel (rnnopt.models.variants.numba_kernels) reads the block once and writes activations and states
once: the memory-access fusion of the guide.

Layout is feature-major, (rows, T*B) with step t in columns t*B .. t*B + B - 1: the recurrent
GEMM is W_hh (G*H, H) @ h_{t-1} (H, B), the layout in which OpenBLAS runs this skinny product
fastest here, and each step's block is what the kernel reads. The kernel adds the summed bias
as it reads the input projection, instead of a pass of its own over the projection (52 MB at
the fastrnns shape, float32). Backward: dh = W_hh^T dz_{t+1} per step, then
dW_ih = dZ X, dW_hh = dZ H_prev^T, dx = W_ih^T dZ as single GEMMs.

The kernels run serial at 1 numba thread and parallel above (numba_kernels: a parallel launch
wakes a pool thread, which cost more than the kernel); the record's notes name the flavour.
The first call compiles the kernels (compile_s), or loads them from numba's cache.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from rnnopt.models.variants.numpy_common import PreallocatedNumpyVariant, time_major_shapes
from rnnopt.models.variants.numpy_fused import GemmSplitRunner


class NumpyNumba(PreallocatedNumpyVariant):
    kind = "numba"
    techniques = ("batching", "preallocation", "hoisted-input-projection", "fused-elementwise")
    summary = (
        "the fused variant's hoisted GEMMs, with each step's gate arithmetic (activations, cell "
        "update, gate derivatives) as one numba-compiled pass over the block, no temporaries"
    )
    memory_note = (
        "feature-major workspaces preallocated once and kept on the variant; the gradient of "
        "the pre-activations overwrites the input projection"
    )
    compiles = True

    @cached_property
    def kernels(self):
        """The kernel flavour for the numba threads in force at first use, kept for the
        variant's life: serial at 1 thread, parallel above (numba_kernels)."""
        from rnnopt.models.variants import numba_kernels  # numba loads only for this variant

        return numba_kernels.kernels_for()

    @property
    def notes(self) -> list[str]:
        """Recorded with each measurement: which kernel flavour ran."""
        flavour = self.kernels.flavour
        return [f"ran the {flavour} numba kernels (serial at 1 thread, parallel above)"]

    def runner(self, params, x, grad_y, lr=1e-3):
        return GemmSplitRunner(self, params, x, grad_y, lr)

    def forward_train(self, p, x, elementwise: bool = True):
        # Workspaces: numpy_common.time_major_shapes, and recurrent (G*H, B). y (B, T, H) is a
        # view of hs, valid until the next call. elementwise=False: the GEMMs alone.
        B, T, I = x.shape
        GH, H = p["weight_hh"].shape
        lstm = self.cell == "lstm"
        ws = self._fwd.get(**time_major_shapes(B, T, I, H, GH, lstm), recurrent=(GH, B))
        if elementwise:
            np.copyto(ws.X.reshape(T, B, I), x.transpose(1, 0, 2))
        np.matmul(p["weight_ih"], ws.X.T, out=ws.pre)
        if elementwise:
            np.add(p["bias_ih"], p["bias_hh"], out=ws.bias)
            ws.recurrent.fill(0)  # h0 = 0: step 0 has no recurrent term
            ws.c.fill(0)
        kernels, one = self.kernels, self.np_dtype.type(1)
        for t in range(T):
            if t > 0:
                np.matmul(p["weight_hh"], ws.hs[:, t * B : (t + 1) * B], out=ws.recurrent)
            if not elementwise:
                continue
            if lstm:
                kernels.lstm_forward_step(
                    ws.pre, ws.bias, ws.recurrent, ws.c, ws.acts, ws.cs, ws.hs, t, 0, H, one
                )
            else:
                kernels.rnn_forward_step(ws.pre, ws.bias, ws.recurrent, ws.hs, t, 0, H)
        return ws.hs[:, B:].reshape(H, T, B).transpose(2, 1, 0), ws

    def backward(self, p, ws, grad_y, elementwise: bool = True):
        # grad_y (B, T, H); dz (G*H, T*B): dL/d(pre-activations) of every step, written over
        # the forward's projection (read only by the forward loop); dh, dc (H, B). Returned
        # grads are buffers (dx a view), valid until the next call.
        B, T, H = grad_y.shape
        GH, I = p["weight_ih"].shape
        g = self._bwd.get(
            dh=(H, B),
            dc=(H, B),
            weight_hh_t=(H, GH),  # W_hh^T contiguous: the faster operand layout for BLAS
            weight_ih=(GH, I),
            weight_hh=(GH, H),
            bias_ih=(GH,),
            bias_hh=(GH,),
            x=(I, T * B),
        )
        if elementwise:
            np.copyto(g.weight_hh_t, p["weight_hh"].T)
            g.dh.fill(0)  # the last step has no dz_{t+1}
            g.dc.fill(0)
        kernels, one, dz = self.kernels, self.np_dtype.type(1), ws.pre
        for t in reversed(range(T)):
            if t < T - 1:
                np.matmul(g.weight_hh_t, dz[:, (t + 1) * B : (t + 2) * B], out=g.dh)
            if not elementwise:
                continue
            if self.cell == "lstm":
                kernels.lstm_backward_step(dz, g.dh, g.dc, grad_y, ws.acts, ws.cs, t, 0, H, one)
            else:
                kernels.rnn_backward_step(dz, g.dh, grad_y, ws.hs, t, 0, H, one)
        np.matmul(dz, ws.X, out=g.weight_ih)
        np.matmul(dz, ws.hs[:, : T * B].T, out=g.weight_hh)
        np.matmul(p["weight_ih"].T, dz, out=g.x)
        if elementwise:
            np.sum(dz, axis=1, out=g.bias_ih)
            np.copyto(g.bias_hh, g.bias_ih)
        return {
            "weight_ih": g.weight_ih,
            "weight_hh": g.weight_hh,
            "bias_ih": g.bias_ih,
            "bias_hh": g.bias_hh,
            "x": g.x.reshape(I, T, B).transpose(2, 1, 0),
        }
