"""The naive loops with preallocated buffers: nothing is allocated inside the time loop."""

from __future__ import annotations

import numpy as np

from rnnopt.models.variants.numpy_common import (
    PreallocatedNumpyVariant,
    lstm_activate_,
    lstm_state_,
    lstm_step_backward_,
    rnn_step_backward_,
)


class NumpyInplace(PreallocatedNumpyVariant):
    kind = "inplace"
    techniques = ("preallocation",)
    summary = (
        "naive loops, but every array preallocated once per shape and written with out=: "
        "no allocation (and no page faults) per step or per call"
    )
    memory_note = (
        "every buffer preallocated once per shape and kept on the variant, backward's included"
    )

    def forward_train(self, p, x):
        # x (B, T, I); per sequence b and step t: z = acts[b, t] (G*H,), h = hs[b, t + 1] (H,);
        # hs[:, 0] = cs[:, 0] = 0 are never written. Returns y = hs[:, 1:] (B, T, H), a view.
        B, T, _ = x.shape
        GH, H = p["weight_hh"].shape
        lstm = self.cell == "lstm"
        ws = self._fwd.get(
            acts=(B, T, GH),
            hs=(B, T + 1, H),
            cs=(B, T + 1, H) if lstm else (0,),
            tanh_c=(B, T, H) if lstm else (0,),
            recurrent=(GH,),
            bias=(GH,),
            tmp=(H,),
        )
        np.add(p["bias_ih"], p["bias_hh"], out=ws.bias)
        for b in range(B):
            for t in range(T):
                z = ws.acts[b, t]
                # The textbook's np.dot(W, h, out=h, where=True) raises TypeError (np.dot has
                # no where=), and a second np.dot(..., out=z) would overwrite, not add: so
                # multiply into a buffer, then add with out=.
                np.matmul(p["weight_ih"], x[b, t], out=z)
                np.matmul(p["weight_hh"], ws.hs[b, t], out=ws.recurrent)
                np.add(z, ws.recurrent, out=z)
                np.add(z, ws.bias, out=z)
                if lstm:
                    lstm_activate_(z)
                    c_prev, c = ws.cs[b, t], ws.cs[b, t + 1]
                    lstm_state_(z, c_prev, c, ws.tanh_c[b, t], ws.hs[b, t + 1], ws.tmp)
                else:
                    np.tanh(z, out=ws.hs[b, t + 1])
        return ws.hs[:, 1:], (x, ws)

    def backward(self, p, cache, grad_y):
        # grad_y (B, T, H); dz (G*H,); dh, dc (H,); the outer-product buffers hold one step's
        # contribution to dW_ih (G*H, I) and dW_hh (G*H, H). Returned grads are buffers too,
        # valid until the next call.
        x, ws = cache
        B, T, I = x.shape
        GH, H = p["weight_hh"].shape
        lstm = self.cell == "lstm"
        g = self._bwd.get(
            weight_ih=(GH, I),
            weight_hh=(GH, H),
            bias_ih=(GH,),
            bias_hh=(GH,),
            x=(B, T, I),
            outer_ih=(GH, I),
            outer_hh=(GH, H),
            dz=(GH,),
            dh=(H,),
            dc=(H,),
            tmp=(H,),
        )
        for name in ("weight_ih", "weight_hh", "bias_ih"):
            getattr(g, name).fill(0)
        for b in range(B):
            g.dh.fill(0)  # dh holds dL/dh_t from step t+1 until grad_y is added
            g.dc.fill(0)
            for t in reversed(range(T)):
                np.add(g.dh, grad_y[b, t], out=g.dh)
                if lstm:
                    a, c_prev, tanh_c = ws.acts[b, t], ws.cs[b, t], ws.tanh_c[b, t]
                    lstm_step_backward_(g.dh, g.dc, a, c_prev, tanh_c, g.dz, g.tmp)
                else:
                    rnn_step_backward_(g.dh, ws.hs[b, t + 1], g.dz)
                # outer products by einsum: np.outer(out=) broadcasts, and NumPy allocates
                # iterator buffers for a broadcast operand on every call; a K=1 matmul is 5x slower
                np.einsum("i,j->ij", g.dz, x[b, t], out=g.outer_ih)
                np.add(g.weight_ih, g.outer_ih, out=g.weight_ih)
                np.einsum("i,j->ij", g.dz, ws.hs[b, t], out=g.outer_hh)
                np.add(g.weight_hh, g.outer_hh, out=g.weight_hh)
                np.add(g.bias_ih, g.dz, out=g.bias_ih)
                np.matmul(g.dz, p["weight_ih"], out=g.x[b, t])
                np.matmul(g.dz, p["weight_hh"], out=g.dh)
        np.copyto(g.bias_hh, g.bias_ih)
        names = ("weight_ih", "weight_hh", "bias_ih", "bias_hh", "x")
        return {name: getattr(g, name) for name in names}
