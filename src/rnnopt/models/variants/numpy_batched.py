"""All sequences of the batch per time step: matrix-matrix products instead of matrix-vector."""

from __future__ import annotations

import numpy as np

from rnnopt.models.variants.base import NumpyVariant
from rnnopt.models.variants.numpy_common import STEPS


class NumpyBatched(NumpyVariant):
    kind = "batched"
    techniques = ("batching",)
    summary = (
        "the whole batch per time step: (B, I) x (I, G*H) GEMMs replace B matrix-vector products"
    )
    memory_note = (
        "each step's gates and states kept for backward as separate "
        "arrays, plus per-step temporaries"
    )

    def forward_train(self, p, x):
        # x (B, T, I); h, c (B, H); z (B, G*H); y (B, T, H)
        step, _ = STEPS[self.cell]
        B, T, _ = x.shape
        H = p["weight_hh"].shape[1]
        y = np.zeros((B, T, H), dtype=x.dtype)
        h = np.zeros((B, H), dtype=x.dtype)
        c = np.zeros((B, H), dtype=x.dtype)
        saved = []  # per step: (h_prev, what the cell keeps for backward)
        for t in range(T):
            # rows are sequences, so the weights multiply from the right, transposed
            z = x[:, t] @ p["weight_ih"].T + p["bias_ih"] + h @ p["weight_hh"].T + p["bias_hh"]
            h_prev = h
            h, c, cell_saved = step(z, c)
            saved.append((h_prev, cell_saved))
            y[:, t] = h
        return y, (x, saved)

    def backward(self, p, cache, grad_y):
        # grad_y (B, T, H); dz (B, G*H); dh_next, dc_next (B, H)
        _, step_backward = STEPS[self.cell]
        x, saved = cache
        B, T, _ = x.shape
        H = p["weight_hh"].shape[1]
        dW_ih = np.zeros_like(p["weight_ih"])
        dW_hh = np.zeros_like(p["weight_hh"])
        db = np.zeros_like(p["bias_ih"])
        dx = np.zeros_like(x)
        dh_next = np.zeros((B, H), dtype=x.dtype)
        dc_next = np.zeros((B, H), dtype=x.dtype)
        for t in reversed(range(T)):
            h_prev, cell_saved = saved[t]
            dh = grad_y[:, t] + dh_next
            dz, dc_next = step_backward(dh, dc_next, cell_saved)
            dW_ih += dz.T @ x[:, t]
            dW_hh += dz.T @ h_prev
            db += dz.sum(axis=0)
            dx[:, t] = dz @ p["weight_ih"]
            dh_next = dz @ p["weight_hh"]
        return {
            "weight_ih": dW_ih,
            "weight_hh": dW_hh,
            "bias_ih": db,
            "bias_hh": db.copy(),  # a separate array: the runner scales each gradient in place
            "x": dx,
        }
