"""torch nn: the library layer, torch.nn.LSTM / torch.nn.RNN(tanh), one layer, batch-first."""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor, nn

from rnnopt.models.params import PARAM_NAMES
from rnnopt.models.variants.torch_base import TorchVariant


class SequenceOnly(nn.Module):
    """The layer's output sequence y (B, T, H), without the final state nn.RNN also returns."""

    def __init__(self, layer: nn.RNNBase):
        super().__init__()
        self.layer = layer

    def forward(self, x: Tensor) -> Tensor:
        return self.layer(x)[0]


class TorchNN(TorchVariant):
    kind = "nn"
    techniques = ("library-kernels",)
    summary = (
        "torch.nn.LSTM / nn.RNN: the whole sequence in one library call (oneDNN LSTM on CPU, "
        "cuDNN on GPU), no per-step Python"
    )
    memory_note = (
        "oneDNN (cuDNN on a GPU) keeps a workspace of every step's gates and states for backward"
    )
    param_names = {name: f"layer.{name}_l0" for name in PARAM_NAMES}

    def make_module(self, input_size: int, hidden_size: int) -> nn.Module:
        if self.cell == "lstm":
            layer = nn.LSTM(input_size, hidden_size, batch_first=True)
        else:
            layer = nn.RNN(input_size, hidden_size, nonlinearity="tanh", batch_first=True)
        return SequenceOnly(layer)

    def autocast(self):
        """Autocast, plus ATen's own LSTM where oneDNN has no bfloat16 on this CPU.

        Under CPU autocast nn.LSTM hands float32 input to oneDNN, autocast casts it to bf16,
        and oneDNN without AVX-512 fails ("could not create a primitive descriptor for the
        LSTM forward propagation primitive"). ATen's native LSTM then runs its GEMMs in bf16
        and the gate maths in float32.
        """
        context = super().autocast()
        if self.dtype != "bfloat16" or self.device != "cpu" or self.cell != "lstm":
            return context
        if torch.ops.mkldnn._is_mkldnn_bf16_supported():
            return context
        self.note("oneDNN has no bfloat16 LSTM on this CPU (needs AVX-512): ran ATen's LSTM")
        stack = contextlib.ExitStack()
        stack.enter_context(context)
        stack.enter_context(onednn_disabled())
        return stack


@contextlib.contextmanager
def onednn_disabled():
    enabled = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = False
    try:
        yield
    finally:
        torch.backends.mkldnn.enabled = enabled
