"""PyTorch minGRU / minLSTM, autograd doing the backward: the sequential loop and the
log-space parallel scan (maths in rnnopt.models.reference; the scan as in numpy_scan).

On CUDA the scan is where the paper's speedups come from: torch.logcumsumexp runs over T in
parallel, while the loop launches a few kernels per step.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from rnnopt.models.params import SCAN_PARAM_NAMES, gate_count
from rnnopt.models.variants.torch_base import TorchVariant

softplus = nn.functional.softplus


def candidate(v: Tensor) -> Tensor:
    return torch.where(v >= 0, v + 0.5, torch.sigmoid(v))


def log_candidate(v: Tensor) -> Tensor:
    # relu keeps the dropped branch's log finite, so its gradient (times 0) is not NaN
    return torch.where(v >= 0, torch.log(torch.relu(v) + 0.5), -softplus(-v))


class ScanCell(nn.Module):
    """x (B, T, I) -> y (B, T, H) of minGRU / minLSTM, h_0 = 0."""

    def __init__(self, cell: str, input_size: int, hidden_size: int, parallel: bool):
        super().__init__()
        rows = gate_count(cell) * hidden_size
        self.cell = cell
        self.parallel = parallel
        self.weight_ih = nn.Parameter(torch.empty(rows, input_size))
        self.bias_ih = nn.Parameter(torch.empty(rows))

    def forward(self, x: Tensor) -> Tensor:
        k = nn.functional.linear(x, self.weight_ih, self.bias_ih)
        gates = k.chunk(gate_count(self.cell), dim=-1)
        if self.parallel:
            log_a, log_b = self.log_coefficients(gates)
            prefix = torch.cumsum(log_a, dim=1)
            return torch.exp(prefix + torch.logcumsumexp(log_b - prefix, dim=1))
        a, b = self.coefficients(gates)
        h = torch.zeros_like(b[:, 0])
        hs = []
        for a_t, b_t in zip(a.unbind(1), b.unbind(1), strict=True):
            h = torch.addcmul(b_t, a_t, h)
            hs.append(h)
        return torch.stack(hs, 1)

    def coefficients(self, gates):
        if self.cell == "mingru":
            k_z, k_h = gates
            z = torch.sigmoid(k_z)
            return 1.0 - z, z * candidate(k_h)
        k_f, k_i, k_h = gates
        a = torch.sigmoid(softplus(-k_i) - softplus(-k_f))  # f / (f + i), no 0 / 0
        return a, (1.0 - a) * candidate(k_h)

    def log_coefficients(self, gates):
        if self.cell == "mingru":
            k_z, k_h = gates
            return -softplus(k_z), -softplus(-k_z) + log_candidate(k_h)
        k_f, k_i, k_h = gates
        diff = softplus(-k_f) - softplus(-k_i)  # log(i / f)
        return -softplus(diff), -softplus(-diff) + log_candidate(k_h)


class TorchScanCell(TorchVariant):
    dtypes = ("float64", "float32", "tfloat32")
    param_names = {name: name for name in SCAN_PARAM_NAMES}
    techniques = ("autograd", "hoisted-input-projection")
    parallel = False

    def make_module(self, input_size: int, hidden_size: int) -> nn.Module:
        return ScanCell(self.cell, input_size, hidden_size, self.parallel)


class TorchScanSeq(TorchScanCell):
    kind = "seq"
    summary = (
        "eager loop of T multiply-adds (addcmul) after one projection GEMM; autograd "
        "records every step"
    )


class TorchScanParallel(TorchScanCell):
    kind = "scan"
    techniques = ("autograd", "hoisted-input-projection", "parallel-scan")
    parallel = True
    summary = (
        "log-space parallel scan: cumsum and torch.logcumsumexp over time, no loop; "
        "autograd differentiates the scan"
    )
    memory_note = "the scan keeps (B, T, H) log-coefficients, prefix sums and exponentials"
