"""torch cell: the hand-written cell loop in eager mode, autograd doing BPTT."""

from __future__ import annotations

from torch import nn

from rnnopt.models.variants.torch_base import TorchVariant
from rnnopt.models.variants.torch_loops import STEPS, CellLoop


class TorchCell(TorchVariant):
    kind = "cell"
    techniques = ("autograd",)
    summary = (
        "eager Python loop over an unbind of the hoisted input projection; autograd records "
        "the graph, so backward is free to write but pays per-op dispatch every step"
    )
    memory_note = (
        "autograd saves each step's intermediates (activations, "
        "tanh(c), products) as separate tensors"
    )

    def make_module(self, input_size: int, hidden_size: int) -> nn.Module:
        return CellLoop(self.cell, input_size, hidden_size, STEPS[self.cell])
