"""Boundary of the PyTorch variants: numpy in/out, dtype policy, autocast, the timing runner.

Dtype policy: float64 / float32 run with weights in that dtype; bfloat16 keeps float32 master
weights under `torch.autocast` (CPU or CUDA); float16 is autocast + GradScaler, CUDA only;
tfloat32 (CUDA only) is float32 storage whose GEMMs and cuDNN RNN run on TF32 tensor cores
(10-bit significand operands, float32 accumulation).
A concrete variant implements `make_module(input_size, hidden_size)`: an nn.Module taking
x (B, T, I) batch-first and returning y (B, T, H), whose parameters map to ours through
`param_names` (our name -> the module's parameter name).
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from rnnopt.models.params import PARAM_NAMES, hidden_size_of
from rnnopt.models.variants.base import Runner, Variant

TORCH_DTYPES = {
    "float64": torch.float64,
    "float32": torch.float32,
    "tfloat32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}
AUTOCAST_DTYPES = ("bfloat16", "float16")


def set_fp32_precision(tf32: bool) -> None:
    """float32 GEMMs (cuBLAS) and cuDNN RNNs on TF32 tensor cores, or in IEEE float32.

    Process-global, read by each kernel launch: a variant sets it when it builds its layer,
    so the variant built last decides (one per process in the timing jobs). The new
    fp32_precision API only: torch refuses a mix of it and the legacy allow_tf32 flags.
    """
    mode = "tf32" if tf32 else "ieee"
    torch.backends.cuda.matmul.fp32_precision = mode
    torch.backends.cudnn.rnn.fp32_precision = mode


# float32 means IEEE float32 here. CUDA's default TF32 for cuDNN RNNs (10-bit significand)
# would fail the 1e-4 equivalence check and make "float32" mean different maths per host;
# TF32 is the dtype tfloat32.
set_fp32_precision(False)


class TorchVariant(Variant):
    framework = "torch"
    dtypes = ("float64", "float32", "tfloat32", "bfloat16", "float16")
    devices = ("cpu", "cuda")
    param_names: dict[str, str] = {name: name for name in PARAM_NAMES}

    @property
    def notes(self) -> list[str]:
        """What torch or this host changed about the run (deprecations, fallbacks): recorded."""
        return self.__dict__.setdefault("_notes", [])

    def note(self, message: str) -> None:
        if message not in self.notes:
            self.notes.append(message)

    def make_module(self, input_size: int, hidden_size: int) -> torch.nn.Module:
        raise NotImplementedError

    @property
    def weight_dtype(self) -> torch.dtype:
        """Dtype of the stored weights: float32 master weights under autocast."""
        return torch.float32 if self.dtype in AUTOCAST_DTYPES else TORCH_DTYPES[self.dtype]

    def autocast(self):
        if self.dtype in AUTOCAST_DTYPES:
            return torch.autocast(device_type=self.device, dtype=TORCH_DTYPES[self.dtype])
        return contextlib.nullcontext()

    def module(self, params: dict[str, np.ndarray]) -> torch.nn.Module:
        """The layer on this variant's device, loaded with `params`."""
        input_size, hidden_size = params["weight_ih"].shape[1], hidden_size_of(self.cell, params)
        set_fp32_precision(self.dtype == "tfloat32")
        module = self.make_module(input_size, hidden_size).to(self.device, self.weight_dtype)
        module_params = dict(module.named_parameters())
        with torch.no_grad():
            for ours, theirs in self.param_names.items():
                module_params[theirs].copy_(torch.from_numpy(params[ours]))
        return module

    def tensor(self, array: np.ndarray, requires_grad: bool = False) -> torch.Tensor:
        t = torch.from_numpy(np.ascontiguousarray(array)).to(self.device, self.weight_dtype)
        return t.requires_grad_(requires_grad)

    def named_grads(self, module: torch.nn.Module) -> dict[str, np.ndarray]:
        module_params = dict(module.named_parameters())
        names = self.param_names.items()
        return {ours: to_numpy(module_params[theirs].grad) for ours, theirs in names}

    def forward(self, params, x):
        module = self.module(params)
        with torch.no_grad(), self.autocast():
            y = module(self.tensor(x))
        return to_numpy(y)

    def vjp(self, params, x, grad_y):
        module = self.module(params)
        x_t = self.tensor(x, requires_grad=True)
        with self.autocast():
            y = module(x_t)
        y.backward(torch.from_numpy(np.asarray(grad_y)).to(y.device, y.dtype))
        return {**self.named_grads(module), "x": to_numpy(x_t.grad)}

    def runner(self, params, x, grad_y, lr=1e-3):
        return TorchRunner(self, params, x, grad_y, lr)


def note_ran_as(variant: TorchVariant, output_dtype: torch.dtype) -> None:
    """Note an autocast layer whose output is not in the dtype asked for: torch 2.11's CUDA
    autocast ran nn.LSTM's cuDNN kernels in float16 under bfloat16 (an H200's records)."""
    asked = TORCH_DTYPES[variant.dtype]
    if variant.dtype in AUTOCAST_DTYPES and output_dtype != asked:
        ran = str(output_dtype).removeprefix("torch.")
        variant.note(f"autocast {variant.dtype} ran the layer in {ran} (its output dtype)")


def to_numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float64).numpy()


class TorchRunner(Runner):
    """The timed phases of a torch variant. The step's update is plain SGD, p -= lr * grad,
    written with one foreach op: torch.optim.SGD computes the same, but constructing any
    torch.optim optimizer imports torch._dynamo (1.9 s under cProfile; about 0.6 s of a
    process's wall time, as backward imports part of it anyway). float16 keeps
    torch.optim.SGD, which its GradScaler steps."""

    def __init__(self, variant: TorchVariant, params, x, grad_y, lr):
        self.variant = variant
        self.device = variant.device
        self.module = variant.module(params)
        self.x = variant.tensor(x)
        out_dtype = TORCH_DTYPES[variant.dtype]
        self.grad_y = torch.from_numpy(np.asarray(grad_y)).to(self.device, out_dtype)
        self.lr = lr
        self.parameters = list(self.module.parameters())
        self.scaler = None
        if variant.dtype == "float16":
            self.optimizer = torch.optim.SGD(self.parameters, lr=lr)
            self.scaler = torch.amp.GradScaler(self.device)
        self._y = None
        self._dtype_checked = False

    def forward(self):
        self._y = None  # release the previous graph before building the next
        with self.variant.autocast():
            self._y = self.module(self.x)
        if not self._dtype_checked:
            note_ran_as(self.variant, self._y.dtype)
            self._dtype_checked = True

    def backward(self):
        # Fresh gradients, as optimizer.zero_grad() leaves them (set_to_none): no accumulation.
        for p in self.parameters:
            p.grad = None
        y, self._y = self._y, None
        if self.scaler is not None:
            y = self.scaler.scale(y)
        y.backward(self.grad_y.to(y.dtype))

    def update(self):
        if self.scaler is None:
            trained = [p for p in self.parameters if p.grad is not None]
            with torch.no_grad():
                torch._foreach_add_(trained, [p.grad for p in trained], alpha=-self.lr)
            return
        self.scaler.step(self.optimizer)
        self.scaler.update()

    def sync(self):
        if self.device == "cuda":
            torch.cuda.synchronize()
