"""torch compile: the hand-written cell loop, its step compiled by torch.compile (Inductor)."""

from __future__ import annotations

import functools
import warnings

import torch
from torch import Tensor, nn

from rnnopt.models.variants.torch_base import TorchVariant
from rnnopt.models.variants.torch_loops import STEPS, CellLoop, Step


@functools.cache
def compiled_step(cell: str) -> Step:
    """The step of `cell` compiled once per process.

    The step, not the unrolled loop: compiling T unrolled steps takes 30-130 s per shape here
    and recompiles for every T, while the step's shapes do not depend on T. dynamic=False
    specialises on (B, H), dtype, grad mode and autocast state; a repeated call that matches
    one of these guards reuses its graph, so only a new shape or mode compiles again. Dynamo
    keys its cache on the function's code, so every module of this process shares it: two
    graphs per (shape, dtype) (no_grad forward, training), and past torch's recompile limit
    (8 per function) Dynamo runs the step eagerly, so keep a process to a few shapes.
    """
    with warnings.catch_warnings():
        # Importing Dynamo decorates torch internals with the deprecated torch.jit.script_method:
        # torch's own import noise, nothing this variant does.
        warnings.filterwarnings("ignore", "`torch.jit.script_method` is deprecated")
        return torch.compile(STEPS[cell], dynamic=False)


class CompiledCellLoop(CellLoop):
    def initial_state(self, xw: Tensor) -> tuple[Tensor, Tensor]:
        """Zeros that require grad when autograd records, like the h and c of later steps.

        Otherwise step 0 alone would compile a second graph (Dynamo guards on requires_grad).
        The price is one (B, G*H) x (G*H, H) GEMM in backward for the unused dh0: 1/T of the
        recurrent backward GEMMs.
        """
        grad = torch.is_grad_enabled()
        return tuple(state.requires_grad_(grad) for state in super().initial_state(xw))


class TorchCompile(TorchVariant):
    kind = "compile"
    techniques = ("torch-compile",)
    summary = (
        "the cell step compiled by torch.compile: Inductor fuses the gate elementwise maths "
        "around the recurrent GEMM, shape-stable across T"
    )
    memory_note = (
        "autograd saves each step's intermediates (activations, tanh(c), products) as "
        "separate tensors"
    )
    compiles = True

    def make_module(self, input_size: int, hidden_size: int) -> nn.Module:
        return CompiledCellLoop(self.cell, input_size, hidden_size, compiled_step(self.cell))
