"""The one registry of variants. Adding a variant = one module + one line in KINDS (a kind of
the recurrent cells) or SCAN_KINDS (a kind of the scan cells)."""

from __future__ import annotations

import glob
import importlib

from rnnopt.errors import UnavailableError, UserError
from rnnopt.models.params import RECURRENT_CELLS, SCAN_CELLS
from rnnopt.models.variants.base import DEVICES, DTYPES, Variant

CELLS = RECURRENT_CELLS
# (framework, kind) -> (module, class); every kind exists for both cells.
KINDS = {
    ("numpy", "naive"): ("rnnopt.models.variants.numpy_naive", "NumpyNaive"),
    ("numpy", "inplace"): ("rnnopt.models.variants.numpy_inplace", "NumpyInplace"),
    ("numpy", "batched"): ("rnnopt.models.variants.numpy_batched", "NumpyBatched"),
    ("numpy", "fused"): ("rnnopt.models.variants.numpy_fused", "NumpyFused"),
    ("numpy", "numba"): ("rnnopt.models.variants.numpy_numba", "NumpyNumba"),
    ("numpy", "persistent"): ("rnnopt.models.variants.numpy_persistent", "NumpyPersistent"),
    ("numpy", "tape"): ("rnnopt.models.variants.numpy_tape", "NumpyTape"),
    ("torch", "cell"): ("rnnopt.models.variants.torch_cell", "TorchCell"),
    ("torch", "nn"): ("rnnopt.models.variants.torch_nn", "TorchNN"),
    ("torch", "jit"): ("rnnopt.models.variants.torch_jit", "TorchJit"),
    ("torch", "compile"): ("rnnopt.models.variants.torch_compile", "TorchCompile"),
}
# minGRU / minLSTM (guide section 7, new architectures): the sequential recurrence and the
# log-space parallel scan; every kind exists for both scan cells.
SCAN_KINDS = {
    ("numpy", "seq"): ("rnnopt.models.variants.numpy_scan", "NumpyScanSeq"),
    ("numpy", "scan"): ("rnnopt.models.variants.numpy_scan", "NumpyScanParallel"),
    ("torch", "seq"): ("rnnopt.models.variants.torch_scan", "TorchScanSeq"),
    ("torch", "scan"): ("rnnopt.models.variants.torch_scan", "TorchScanParallel"),
}
_NAMES = {
    f"{framework}-{cell}-{kind}": (framework, cell, kind)
    for kinds, cells in ((KINDS, CELLS), (SCAN_KINDS, SCAN_CELLS))
    for (framework, kind) in kinds
    for cell in cells
}


def list_variants() -> list[str]:
    """Every variant name: the numpy ladder, then torch, then the scan cells."""
    return list(_NAMES)


def name_parts(name: str) -> tuple[str, str, str]:
    """(framework, cell, kind) of a variant name."""
    if name not in _NAMES:
        raise UserError(f"unknown variant {name!r}; available: {', '.join(_NAMES)}")
    return _NAMES[name]


def variant_class(name: str) -> type[Variant]:
    framework, cell, kind = name_parts(name)
    module, cls = (SCAN_KINDS if cell in SCAN_CELLS else KINDS)[(framework, kind)]
    return getattr(importlib.import_module(module), cls)


# Device files a GPU runtime opens: NVIDIA's driver, WSL's GPU paravirtualisation, ROCm (which
# torch.cuda serves too). Without any of them torch.cuda finds no device, and a job can say so
# without importing torch (2-3 s of every CUDA job on a CPU host, or node).
GPU_DEVICE_FILES = ("/dev/nvidia[0-9]*", "/dev/dxg", "/dev/kfd")


def gpu_device_files() -> bool:
    return any(glob.glob(pattern) for pattern in GPU_DEVICE_FILES)


def cuda_available() -> bool:
    if not gpu_device_files():
        return False
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return False
    return torch.cuda.is_available()


def get_variant(name: str, dtype: str = "float32", device: str = "cpu") -> Variant:
    """The variant `name` at `dtype` on `device`.

    Raises UserError for an unknown name, dtype or device, or a combination the variant does
    not implement (numpy on cuda, float16 on CPU), and UnavailableError (a UserError) for a
    valid request this host cannot serve (cuda without a GPU). Messages list what is available.
    """
    framework, cell, _ = name_parts(name)
    if dtype not in DTYPES:
        raise UserError(f"unknown dtype {dtype!r}; choose from {', '.join(DTYPES)}")
    if device not in DEVICES:
        raise UserError(f"unknown device {device!r}; choose from {', '.join(DEVICES)}")
    if framework == "torch" and device == "cuda" and not cuda_available():
        # before the class imports torch: cuda_available imports it only where a GPU may be
        raise UnavailableError(f"{name} on cuda: no CUDA device on this host; available: cpu")
    cls = variant_class(name)
    if device not in cls.devices:
        raise UserError(f"{name} does not run on {device}; available: {', '.join(cls.devices)}")
    allowed = supported_dtypes(cls, device)
    if dtype not in allowed:
        raise UserError(
            f"{name} does not support {dtype} on {device}; available: {', '.join(allowed)}"
        )
    return cls(cell=cell, dtype=dtype, device=device)


def supported_dtypes(cls: type[Variant], device: str) -> tuple[str, ...]:
    # float16 autocast + GradScaler is a CUDA recipe; CPU mixed precision is bfloat16. TF32 is
    # a mode of NVIDIA's tensor cores.
    cuda_only = ("float16", "tfloat32")
    return tuple(d for d in cls.dtypes if not (d in cuda_only and device == "cpu"))
