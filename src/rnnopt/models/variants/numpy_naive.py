"""The textbook RNN / LSTM in NumPy (min-char-rnn style): the baseline of the ladder."""

from __future__ import annotations

import numpy as np

from rnnopt.models.variants.base import NumpyVariant
from rnnopt.models.variants.numpy_common import STEPS


class NumpyNaive(NumpyVariant):
    kind = "naive"
    techniques = ()
    summary = (
        "textbook loops: one sequence at a time, matrix-vector products, new arrays every step"
    )
    memory_note = (
        "new arrays every step; each step's gates and states kept for backward as separate arrays"
    )

    def forward_train(self, p, x):
        # x (B, T, I); h, c (H,); z (G*H,); y (B, T, H)
        step, _ = STEPS[self.cell]
        B, T, _ = x.shape
        H = p["weight_hh"].shape[1]
        y = np.zeros((B, T, H), dtype=x.dtype)
        saved = []  # per sequence: per step (h_prev, what the cell keeps for backward)
        for b in range(B):
            h = np.zeros(H, dtype=x.dtype)
            c = np.zeros(H, dtype=x.dtype)
            steps = []
            for t in range(T):
                z = p["weight_ih"] @ x[b, t] + p["bias_ih"] + p["weight_hh"] @ h + p["bias_hh"]
                h_prev = h
                h, c, cell_saved = step(z, c)
                steps.append((h_prev, cell_saved))
                y[b, t] = h
            saved.append(steps)
        return y, (x, saved)

    def backward(self, p, cache, grad_y):
        # grad_y (B, T, H); dz (G*H,); dh_next, dc_next (H,)
        _, step_backward = STEPS[self.cell]
        x, saved = cache
        B, T, _ = x.shape
        H = p["weight_hh"].shape[1]
        dW_ih = np.zeros_like(p["weight_ih"])
        dW_hh = np.zeros_like(p["weight_hh"])
        db = np.zeros_like(p["bias_ih"])
        dx = np.zeros_like(x)
        for b in range(B):
            dh_next = np.zeros(H, dtype=x.dtype)
            dc_next = np.zeros(H, dtype=x.dtype)
            for t in reversed(range(T)):
                h_prev, cell_saved = saved[b][t]
                dh = grad_y[b, t] + dh_next
                dz, dc_next = step_backward(dh, dc_next, cell_saved)
                dW_ih += np.outer(dz, x[b, t])
                dW_hh += np.outer(dz, h_prev)
                db += dz
                dx[b, t] = p["weight_ih"].T @ dz
                dh_next = p["weight_hh"].T @ dz
        return {
            "weight_ih": dW_ih,
            "weight_hh": dW_hh,
            "bias_ih": db,
            "bias_hh": db.copy(),  # a separate array: the runner scales each gradient in place
            "x": dx,
        }
