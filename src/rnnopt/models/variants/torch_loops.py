"""The hand-written cell loop shared by the torch cell, jit and compile variants.

One loop, three ways to run it: eager (`cell`), scripted whole (`jit`), or eager with a
compiled step (`compile`). The step is a plain function held as a module attribute, so
TorchScript scripts it along with the loop and `torch.compile` can wrap it alone.

Shapes: x (B, T, I), xw (T, B, G*H) time-major, h and c (B, H), y (B, T, H).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from rnnopt.models.params import gate_count


def rnn_step(xw_t: Tensor, h: Tensor, c: Tensor, weight_hh: Tensor) -> tuple[Tensor, Tensor]:
    """h_t = tanh(xw_t + h_{t-1} W_hh^T); the tanh RNN has no cell state, c passes through."""
    return torch.tanh(torch.addmm(xw_t, h, weight_hh.t())), c


def lstm_step(xw_t: Tensor, h: Tensor, c: Tensor, weight_hh: Tensor) -> tuple[Tensor, Tensor]:
    """One LSTM step, gate order i, f, g, o; xw_t already holds x_t W_ih^T + b_ih + b_hh."""
    z = torch.addmm(xw_t, h, weight_hh.t())  # (B, 4H): the recurrent GEMM adds onto xw_t
    i, f, g, o = z.chunk(4, 1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    h = torch.sigmoid(o) * torch.tanh(c)
    return h, c


STEPS = {"rnn": rnn_step, "lstm": lstm_step}
Step = Callable[[Tensor, Tensor, Tensor, Tensor], tuple[Tensor, Tensor]]


class CellLoop(nn.Module):
    """One recurrent layer as a Python loop over time around `step`; h0 = c0 = 0.

    The input projection is hoisted: one (T*B, I) x (I, G*H) GEMM for all steps, both biases
    added once. The loop iterates `xw.unbind(0)`: indexing `xw[t]` instead makes autograd
    accumulate T full-size gradient buffers, so backward turns quadratic in T.
    """

    def __init__(self, cell: str, input_size: int, hidden_size: int, step: Step):
        super().__init__()
        rows = gate_count(cell) * hidden_size
        self.hidden_size = hidden_size
        self.weight_ih = nn.Parameter(torch.empty(rows, input_size))
        self.weight_hh = nn.Parameter(torch.empty(rows, hidden_size))
        self.bias_ih = nn.Parameter(torch.empty(rows))
        self.bias_hh = nn.Parameter(torch.empty(rows))
        self.step = step

    def initial_state(self, xw: Tensor) -> tuple[Tensor, Tensor]:
        """h0 = c0 = 0 (B, H) in the dtype of xw: the compute dtype, bfloat16 under autocast.

        Two tensors, not one shared zero: a compiled step specialises on aliased inputs.
        """
        batch = xw.shape[1]
        return xw.new_zeros(batch, self.hidden_size), xw.new_zeros(batch, self.hidden_size)

    def forward(self, x: Tensor) -> Tensor:
        xw = nn.functional.linear(x.transpose(0, 1), self.weight_ih, self.bias_ih + self.bias_hh)
        h, c = self.initial_state(xw)
        hs: list[Tensor] = []
        for xw_t in xw.unbind(0):
            h, c = self.step(xw_t, h, c, self.weight_hh)
            hs.append(h)
        return torch.stack(hs, 1)
