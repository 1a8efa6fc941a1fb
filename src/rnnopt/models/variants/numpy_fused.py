"""cuDNN's strategy in NumPy: every GEMM that does not depend on h is hoisted out of the loop.

Forward: the input projection of all T steps is one (T*B, I) x (I, G*H) GEMM; the loop does
only h_{t-1} @ W_hh^T and the gate arithmetic, in place on one (B, G*H) block per step.
Backward: the loop does only dh = dz_t @ W_hh and elementwise work, keeping dz of every step;
dW_ih = dZ^T X, dW_hh = dZ^T H_prev and dx = dZ W_ih are then three single GEMMs.
Layout is time-major inside, so each step's (B, .) block is contiguous. The summed bias is
added to the whole projection once, before the loop.

Gates go through exp, not tanh: sigmoid(z) = 1 / (1 + exp(-z)), tanh(z) = 2 / (1 + exp(-2z)) - 1.
NumPy's exp is 1.2-2x faster than its tanh here, and one exp call covers all G gates of a row.
The -1 / -2 factors live in scaled copies of the weights (exact: powers of two).
"""

from __future__ import annotations

import numpy as np

from rnnopt.models.variants.base import NumpyRunner
from rnnopt.models.variants.numpy_common import (
    PreallocatedNumpyVariant,
    gates,
    lstm_state_,
    lstm_step_backward_,
    rnn_step_backward_,
)

# per gate, the factor s with activation = -s / (1 + exp(s * z)), minus 1 for tanh gates
GATE_SCALES = {"rnn": (-2.0,), "lstm": (-1.0, -1.0, -2.0, -1.0)}


class NumpyFused(PreallocatedNumpyVariant):
    kind = "fused"
    techniques = ("batching", "preallocation", "hoisted-input-projection")
    summary = (
        "input projection as one (T*B, I) x (I, G*H) GEMM before the loop, weight and input "
        "gradients as single GEMMs after it, preallocated time-major workspaces"
    )
    memory_note = (
        "time-major workspaces (gates, states, their gradients) "
        "preallocated once and kept on the variant"
    )

    def runner(self, params, x, grad_y, lr=1e-3):
        return GemmSplitRunner(self, params, x, grad_y, lr)

    def forward_train(self, p, x, elementwise: bool = True):
        # x (B, T, I) -> X (T, B, I); acts (T, B, G*H): scaled projection + bias, then
        # activations; hs (T+1, B, H) with hs[0] = h0 = 0 (never written), likewise cs.
        # y (B, T, H) is a view of hs, valid until the next call. elementwise=False: the
        # GEMMs alone (rnnopt.measure.split).
        B, T, I = x.shape
        GH, H = p["weight_hh"].shape
        lstm = self.cell == "lstm"
        ws = self._fwd.get(
            X=(T, B, I),
            acts=(T, B, GH),
            hs=(T + 1, B, H),
            cs=(T + 1, B, H) if lstm else (0,),
            tanh_c=(T, B, H) if lstm else (0,),
            scale=(GH, 1),
            weight_ih=(GH, I),
            weight_hh=(GH, H),
            bias=(B, GH),  # (B, G*H) blocks, not (G*H,) rows: a broadcast operand is slow
            numerator=(B, GH),
            recurrent=(B, GH),
            tmp=(B, H),
        )
        if elementwise:
            self._scale_weights(p, ws)
            np.copyto(ws.X, x.transpose(1, 0, 2))
        np.matmul(ws.X.reshape(T * B, I), ws.weight_ih.T, out=ws.acts.reshape(T * B, GH))
        if elementwise:
            np.add(ws.acts, ws.bias, out=ws.acts)
        self._forward_loop(ws, elementwise)
        return ws.hs[1:].transpose(1, 0, 2), ws

    def _scale_weights(self, p, ws) -> None:
        """Weights and bias times the gate scales, the bias summed once; numerator = -scale."""
        H = p["weight_hh"].shape[1]
        for k, scale in enumerate(GATE_SCALES[self.cell]):
            ws.scale[k * H : (k + 1) * H] = scale
        np.multiply(p["weight_ih"], ws.scale, out=ws.weight_ih)
        np.multiply(p["weight_hh"], ws.scale, out=ws.weight_hh)
        np.add(p["bias_ih"], p["bias_hh"], out=ws.bias[0])
        np.multiply(ws.bias[0], ws.scale[:, 0], out=ws.bias[0])
        ws.bias[1:] = ws.bias[0]
        np.negative(ws.scale[:, 0], out=ws.numerator[0])
        ws.numerator[1:] = ws.numerator[0]

    def _forward_loop(self, ws, elementwise: bool) -> None:
        # per step t: a = acts[t] (B, G*H), h_{t-1} = hs[t], h_t = hs[t + 1] (B, H)
        T = ws.acts.shape[0]
        with np.errstate(over="ignore"):  # exp(s*z) = inf gives the right limit, 0 or -1
            for t in range(T):
                a = ws.acts[t]
                if t > 0:  # h0 = 0 contributes nothing
                    np.matmul(ws.hs[t], ws.weight_hh.T, out=ws.recurrent)
                if not elementwise:
                    continue
                if t > 0:
                    np.add(a, ws.recurrent, out=a)
                np.exp(a, out=a)
                np.add(a, 1.0, out=a)
                np.divide(ws.numerator, a, out=a)
                if self.cell == "lstm":
                    g = gates(a)[2]
                    np.subtract(g, 1.0, out=g)
                    lstm_state_(a, ws.cs[t], ws.cs[t + 1], ws.tanh_c[t], ws.hs[t + 1], ws.tmp)
                else:
                    np.subtract(a, 1.0, out=ws.hs[t + 1])

    def backward(self, p, ws, grad_y, elementwise: bool = True):
        # grad_y (B, T, H); dZ (T, B, G*H): dL/d(pre-activations) of every step; dh, dc (B, H).
        # Returned grads are buffers (dx a view), valid until the next call.
        B, T, H = grad_y.shape
        GH, I = p["weight_ih"].shape
        g = self._bwd.get(
            dZ=(T, B, GH),
            dh=(B, H),
            dc=(B, H),
            tmp=(B, H),
            weight_ih=(GH, I),
            weight_hh=(GH, H),
            bias_ih=(GH,),
            bias_hh=(GH,),
            x=(T, B, I),
        )
        self._backward_loop(p, ws, g, grad_y, elementwise)
        dZ = g.dZ.reshape(T * B, GH)
        np.matmul(dZ.T, ws.X.reshape(T * B, I), out=g.weight_ih)
        np.matmul(dZ.T, ws.hs[:T].reshape(T * B, H), out=g.weight_hh)
        if elementwise:
            np.sum(dZ, axis=0, out=g.bias_ih)
            np.copyto(g.bias_hh, g.bias_ih)
        np.matmul(dZ, p["weight_ih"], out=g.x.reshape(T * B, I))
        return {
            "weight_ih": g.weight_ih,
            "weight_hh": g.weight_hh,
            "bias_ih": g.bias_ih,
            "bias_hh": g.bias_hh,
            "x": g.x.transpose(1, 0, 2),
        }

    def _backward_loop(self, p, ws, g, grad_y, elementwise: bool) -> None:
        # per step t, backwards: dh (B, H) = dL/dh_t, dc carried from t+1; fills g.dZ[t]
        T = ws.acts.shape[0]
        g.dc.fill(0)
        for t in reversed(range(T)):
            if t < T - 1:
                np.matmul(g.dZ[t + 1], p["weight_hh"], out=g.dh)
            if not elementwise:
                continue
            if t == T - 1:
                np.copyto(g.dh, grad_y[:, t])
            else:
                np.add(g.dh, grad_y[:, t], out=g.dh)
            if self.cell == "lstm":
                a, c_prev, tanh_c = ws.acts[t], ws.cs[t], ws.tanh_c[t]
                lstm_step_backward_(g.dh, g.dc, a, c_prev, tanh_c, g.dZ[t], g.tmp)
            else:
                rnn_step_backward_(g.dh, ws.hs[t + 1], g.dZ[t])


class GemmSplitRunner(NumpyRunner):
    """A NumpyRunner that can also run each phase's loop with its GEMMs alone
    (rnnopt.measure.split).

    The variant's `forward_train` and `backward` take `elementwise=False` for that: the same
    GEMM calls on the same buffers, every other operation skipped.
    """

    def gemm_only(self, phase: str):
        """A callable running the GEMMs of `phase` ("forward", "backward", "step")."""
        return self._loop(phase, elementwise=False)

    def _loop(self, phase: str, **options):
        """A callable running `phase` with `options` passed to the variant's forward_train and
        backward."""
        if self._cache is None:
            self.forward()  # backward's GEMMs read the forward's workspaces
        variant, p, x, grad_y = self.variant, self.p, self.x, self.grad_y

        def forward():
            variant.forward_train(p, x, **options)

        def backward():
            variant.backward(p, self._cache, grad_y, **options)

        def step():
            forward()
            backward()

        return {"forward": forward, "backward": backward, "step": step}[phase]
