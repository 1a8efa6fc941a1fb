"""Published figures of other machines beside this project's GPU rows: context, never a verdict.

DeepBench (Baidu's deep-learning kernel benchmark) published cuDNN LSTM forward times of
training (cudnnRNNForwardTraining) on an NVIDIA V100 at shapes rnnopt's GPU config shares:
one layer, input size = hidden size, batch 64, 25 time steps. rnnopt's matching row is
torch-lstm-nn's forward phase at B=64, T=25, I=H, timed as a segment of the training step
(autograd recording), so both keep the activations for backward.
"""

from __future__ import annotations

import pandas as pd

from rnnopt.report import wide
from rnnopt.report.wide import NONE

SOURCE = "DeepBench, NVIDIA V100 (published; another GPU)"
DEEPBENCH_V100_FORWARD_MS = (
    ({"batch": 64, "seq_len": 25, "hidden_size": 512}, {"float32": 1.341, "float16": 0.79}),
    ({"batch": 64, "seq_len": 25, "hidden_size": 1024}, {"float32": 2.205, "float16": 1.39}),
)
DTYPES = ("float32", "tfloat32", "float16", "bfloat16")
ABOUT = (
    "LSTM forward (training mode), ms per call: DeepBench's published V100 figures (cuDNN) "
    "beside torch-lstm-nn's forward on each CUDA run at the same shape (I = H, median of the "
    "step's forward segments). Other GPU, other cuDNN: a scale to place this GPU's rows, "
    "not a comparison that gets a verdict."
)


def table(metrics: pd.DataFrame) -> pd.DataFrame:
    profile = wide.records(metrics, "profile")
    forward = profile[
        (profile["device"] == "cuda")
        & (profile["status"] == "ok")
        & (profile["variant"] == "torch-lstm-nn")
        & (profile["phase"] == "forward")
    ]
    rows = []
    for shape, published in DEEPBENCH_V100_FORWARD_MS:
        text = f"B{shape['batch']} T{shape['seq_len']} I=H={shape['hidden_size']}"
        rows.append({"source": SOURCE, "shape": text, **_cells(published)})
        at_shape = forward[
            (forward["batch"] == shape["batch"])
            & (forward["seq_len"] == shape["seq_len"])
            & (forward["input_size"] == shape["hidden_size"])
            & (forward["hidden_size"] == shape["hidden_size"])
        ]
        for run, group in at_shape.groupby("run"):
            measured = dict(zip(group["dtype"], group["time_ms.median"], strict=True))
            gpu = group["gpu"].iloc[0] if pd.notna(group["gpu"].iloc[0]) else run
            source = f"{run} ({gpu}), torch-lstm-nn"
            rows.append({"source": source, "shape": text, **_cells(measured)})
    return pd.DataFrame(rows, columns=["source", "shape", *(f"{d} ms" for d in DTYPES)])


def _cells(times: dict) -> dict[str, str]:
    return {
        f"{dtype} ms": f"{times[dtype]:.3g}" if pd.notna(times.get(dtype)) else NONE
        for dtype in DTYPES
    }
