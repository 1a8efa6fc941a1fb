"""The optimisation comparison table as data: one spec per row, no per-row code paths.

A row compares a candidate against a baseline, each selected by a variant pattern and fixed
fields. `method` says which records measure it (rnnopt.report.outcomes): "pair" pairs profile,
memory and train records of the two sides at equal shape, phase, threads and task; the three
training experiments have their own methods. `criteria` say what must hold for the guide's
claim to count as supported (rnnopt.report.verdicts). Adding a row is adding a spec here.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

import numpy as np
import pandas as pd

from rnnopt.report.wide import DTYPE_SHORT


def _matches(values: pd.Series, pattern: str) -> np.ndarray:
    return np.array([isinstance(v, str) and fnmatch.fnmatch(v, pattern) for v in values], bool)


@dataclass(frozen=True)
class Side:
    """Records of one side of a comparison: variant pattern plus fixed fields (None: any)."""

    variant: str = "*"
    dtype: str | None = None
    device: str | None = None
    setting: str | None = None

    def mask(self, frame: pd.DataFrame) -> pd.Series:
        keep = _matches(frame["variant"], self.variant)
        for field in ("dtype", "device", "setting"):
            value = getattr(self, field)
            if value is not None:
                keep &= _matches(frame[field], value)
        return pd.Series(keep, index=frame.index, dtype=bool)

    def __str__(self) -> str:
        parts = [
            self.variant if self.variant != "*" else "",
            DTYPE_SHORT.get(self.dtype, self.dtype or ""),
        ]
        if self.device not in (None, "cpu"):
            parts.append(self.device)
        if self.setting:
            parts.append(self.setting)
        return " ".join(p for p in parts if p)


@dataclass(frozen=True)
class Comparison:
    optimisation: str
    claims: tuple[str, ...]
    candidate: Side
    baseline: Side
    method: str = "pair"  # pair | clipping | accumulation | batch_size
    criteria: tuple[str, ...] = ("speed",)
    about: str = ""

    @property
    def compared(self) -> str:
        return f"{self.candidate} vs {self.baseline}"


F64, F32 = "float64", "float32"
CPU, CUDA = "cpu", "cuda"

COMPARISONS: tuple[Comparison, ...] = (
    Comparison(
        "vectorisation / batching",
        ("C1", "C3"),
        Side("numpy-*-batched", F64, CPU),
        Side("numpy-*-naive", F64, CPU),
        about="one (B, H) GEMM per step instead of a Python loop over the batch",
    ),
    Comparison(
        "in-place / preallocation",
        ("C2",),
        Side("numpy-*-inplace", F64, CPU),
        Side("numpy-*-naive", F64, CPU),
        criteria=("allocations", "speed"),
        about="buffers allocated once and written with out=, instead of new arrays per step",
    ),
    Comparison(
        "fewer temporaries, less garbage collection",
        ("C12",),
        Side("numpy-*-inplace", F64, CPU),
        Side("numpy-*-naive", F64, CPU),
        criteria=("gc",),
        about="share of the naive variant's time spent in garbage-collection pauses",
    ),
    Comparison(
        "hoisted input projection",
        ("C13",),
        Side("numpy-*-fused", F32, CPU),
        Side("numpy-*-batched", F32, CPU),
        about="x @ W_ih for all T steps in one GEMM: W_ih read once, not every step "
        "(float32: measured at the small and the fastrnns shape)",
    ),
    Comparison(
        "fused elementwise kernel (memory-access fusion)",
        ("C2", "C13"),
        Side("numpy-*-numba", F32, CPU),
        Side("numpy-*-fused", F32, CPU),
        about="each step's gate arithmetic as one numba pass over the gate block instead of "
        "about seven NumPy passes with temporaries; same hoisted GEMMs (see the GEMM / "
        "elementwise split in the variants table)",
    ),
    Comparison(
        "float32 instead of float64",
        ("C6",),
        Side("numpy-*-fused", F32, CPU),
        Side("numpy-*-fused", F64, CPU),
        criteria=("speed", "memory"),
    ),
    Comparison(
        "library kernels (nn.LSTM vs hand-written cell)",
        ("C8",),
        Side("torch-*-nn", F32, CPU),
        Side("torch-*-cell", F32, CPU),
    ),
    Comparison(
        "library kernels (PyTorch vs NumPy)",
        ("C8",),
        Side("torch-*-nn", F32, CPU),
        Side("numpy-*-fused", F32, CPU),
    ),
    Comparison(
        "TorchScript",
        ("C10",),
        Side("torch-*-jit", F32, CPU),
        Side("torch-*-cell", F32, CPU),
    ),
    Comparison(
        "torch.compile",
        ("C8", "C10"),
        Side("torch-*-compile", F32, CPU),
        Side("torch-*-cell", F32, CPU),
        about="compile time is reported apart (compile_s), not in the speedup",
    ),
    Comparison(
        "mixed precision (bfloat16, CPU)",
        ("C11",),
        Side("torch-*-nn", "bfloat16", CPU),
        Side("torch-*-nn", F32, CPU),
        criteria=("speed", "memory"),
    ),
    Comparison(
        "mixed precision (float16, CUDA)",
        ("C11",),
        Side("torch-*-nn", "float16", CUDA),
        Side("torch-*-nn", F32, CUDA),
        criteria=("speed", "memory"),
    ),
    Comparison(
        "mixed precision (bfloat16, CUDA)",
        ("C11",),
        Side("torch-*-nn", "bfloat16", CUDA),
        Side("torch-*-nn", F32, CUDA),
        criteria=("speed", "memory"),
    ),
    Comparison(
        "TF32 tensor cores (CUDA)",
        ("C11",),
        Side("torch-*-nn", "tfloat32", CUDA),
        Side("torch-*-nn", F32, CUDA),
        about="float32 storage, GEMMs on TF32 tensor cores (10-bit significand operands)",
    ),
    Comparison(
        "GPU",
        ("C9",),
        Side("torch-*-nn", F32, CUDA),
        Side("torch-*-nn", F32, CPU),
        about="the GPU against one thread of the same host's CPU, both IEEE float32",
    ),
    Comparison(
        "library kernels on the GPU (cuDNN vs cell loop)",
        ("C8", "C9"),
        Side("torch-*-nn", F32, CUDA),
        Side("torch-*-cell", F32, CUDA),
    ),
    Comparison(
        "torch.compile on the GPU",
        ("C8", "C10"),
        Side("torch-*-compile", F32, CUDA),
        Side("torch-*-cell", F32, CUDA),
    ),
    Comparison(
        "parallel scan (minGRU, minLSTM; NumPy)",
        ("S7",),
        Side("numpy-min*-scan", F32, CPU),
        Side("numpy-min*-seq", F32, CPU),
        about="guide section 7, new architectures: gates from x_t alone, so all T steps are "
        "one log-space scan (cumsum, logaddexp.accumulate) instead of a loop; per T",
    ),
    Comparison(
        "parallel scan (minGRU, minLSTM; PyTorch)",
        ("S7",),
        Side("torch-min*-scan", F32, CPU),
        Side("torch-min*-seq", F32, CPU),
        about="torch.logcumsumexp over time against an eager loop of T addcmul; per T",
    ),
    Comparison(
        "parallel scan on the GPU (minGRU, minLSTM)",
        ("S7", "C9"),
        Side("torch-min*-scan", F32, CUDA),
        Side("torch-min*-seq", F32, CUDA),
    ),
    Comparison(
        "gradient clipping",
        ("C7",),
        Side(setting="clip-on"),
        Side(setting="clip-off"),
        method="clipping",
        criteria=("stability",),
        about=(
            "one high learning rate with and without clipping; speedup: step time without / "
            "with (each run's 10th-percentile step), where both runs took every step (a "
            "diverged run's first steps are warm-up)"
        ),
    ),
    Comparison(
        "gradient accumulation",
        ("C5",),
        Side(setting="accum-*"),
        Side(setting="accum-1x*"),
        method="accumulation",
        criteria=("learned", "memory", "same_loss"),
        about=(
            "K micro-batches vs one batch of the same size; speedup: step time of one / of K "
            "(each run's 10th-percentile step)"
        ),
    ),
    Comparison(
        "batch-size choice",
        ("C4",),
        Side(setting="batch-*"),
        Side(setting="batch-*"),
        method="batch_size",
        criteria=("learned", "throughput"),
        about=(
            "tokens/s of the best batch size vs the smallest (each process's 10th-percentile "
            "step; the interval over the runs' processes, as the speedups')"
        ),
    ),
)
