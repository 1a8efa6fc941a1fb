"""torch jit: the hand-written cell loop scripted whole with torch.jit.script."""

from __future__ import annotations

import warnings

import torch
from torch import nn

from rnnopt.models.variants.torch_base import TorchVariant
from rnnopt.models.variants.torch_loops import STEPS, CellLoop


class TorchJit(TorchVariant):
    kind = "jit"
    techniques = ("torchscript",)
    summary = (
        "the cell loop as TorchScript: the loop runs in the graph executor, not in Python "
        "(no CPU fuser in torch 2.13: LLVM backend missing)"
    )
    memory_note = (
        "autograd saves each step's intermediates (activations, tanh(c), products) as "
        "separate tensors"
    )

    def make_module(self, input_size: int, hidden_size: int) -> nn.Module:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            module = torch.jit.script(
                CellLoop(self.cell, input_size, hidden_size, STEPS[self.cell])
            )
        # torch 2.13 deprecates torch.jit.script: a note for the record, not noise on stderr.
        for warning in caught:
            self.note(f"{warning.category.__name__}: {warning.message}")
        return module
