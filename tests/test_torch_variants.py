"""The torch variants (cell, nn, jit, compile) against the float64 reference.

bfloat16 tolerance: bf16 keeps an 8-bit significand, eps = 2^-8 ~ 3.9e-3, so every cast of an
input, weight, GEMM output or gate activation is off by up to eps/2. At the test shape (T = 5)
the worst max_rel_error over 10 seeds, all four variants, was 9e-3 on y and 1.6e-2 on the
gradients (weight gradients sum B*T rounded products); at T = 100 it reached 2.6e-2
(nn.RNN's weight_hh), the saturating gates keeping the growth with T slow. BF16_TOLERANCE
= 10 eps leaves 2.5x headroom at T = 5. BF16_FLOOR checks the other way: an error that small
would mean the layer silently ran in float32.

Every compiled (cell, dtype) pair costs two Inductor graphs (no_grad forward, training step),
so all compile cases share one small shape; with a warm TORCHINDUCTOR_CACHE_DIR they reload.
"""

import json
import warnings

import pytest
import torch

from rnnopt import get_variant
from rnnopt.errors import UnavailableError, UserError
from rnnopt.models import reference
from rnnopt.models.params import PARAM_NAMES
from tests.conftest import fresh_python, max_rel_error, small_problem

KINDS = ("cell", "nn", "jit", "compile")
BF16_TOLERANCE = 10 * 2.0**-8
BF16_FLOOR = 1e-4
TOLERANCES = {
    "float64": 1e-10,
    "float32": 1e-4,
    "tfloat32": 10 * 2.0**-10,  # TF32 tensor cores: 10-bit significand, float32 accumulation
    "bfloat16": BF16_TOLERANCE,
    "float16": BF16_TOLERANCE,  # eps 2^-11, but GradScaler-free vjp: keep bf16's margin
}
CPU_DTYPES = ("float64", "float32", "bfloat16")
TECHNIQUES = {
    "cell": ("autograd",),
    "nn": ("library-kernels",),
    "jit": ("torchscript",),
    "compile": ("torch-compile",),
}
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@pytest.mark.parametrize("kind", KINDS)
def test_variant_describes_itself(kind, cell):
    variant = get_variant(f"torch-{cell}-{kind}")
    assert variant.name == f"torch-{cell}-{kind}"
    assert variant.describe()["techniques"] == list(TECHNIQUES[kind])
    assert variant.summary
    assert variant.compiles == (kind == "compile")


def errors_against_reference(variant, cell):
    """max_rel_error of y and of every gradient, keyed "y", "weight_ih", ..., "x"."""
    params, x, grad_y = small_problem(cell)
    errors = {"y": max_rel_error(variant.forward(params, x), reference.forward(params, x))}
    grads = variant.vjp(params, x, grad_y)
    expected = reference.vjp(params, x, grad_y)
    assert set(grads) == set(expected)
    return errors | {name: max_rel_error(grads[name], expected[name]) for name in expected}


@pytest.mark.parametrize("dtype", CPU_DTYPES)
@pytest.mark.parametrize("kind", KINDS)
def test_matches_reference_on_cpu(kind, dtype, cell):
    errors = errors_against_reference(get_variant(f"torch-{cell}-{kind}", dtype=dtype), cell)
    assert max(errors.values()) <= TOLERANCES[dtype], errors
    if dtype == "bfloat16":
        assert min(errors.values()) > BF16_FLOOR, errors


@needs_cuda
@pytest.mark.parametrize("dtype", TOLERANCES)
@pytest.mark.parametrize("kind", KINDS)
def test_matches_reference_on_cuda(kind, dtype, cell):
    variant = get_variant(f"torch-{cell}-{kind}", dtype=dtype, device="cuda")
    errors = errors_against_reference(variant, cell)
    assert max(errors.values()) <= TOLERANCES[dtype], errors


def runner_weights(runner):
    module_params = dict(runner.module.named_parameters())
    names = runner.variant.param_names
    return {ours: module_params[names[ours]].detach().double().cpu().numpy() for ours in names}


@pytest.mark.parametrize("dtype", ["float64", "bfloat16"])
@pytest.mark.parametrize("kind", KINDS)
def test_runner_step_is_one_sgd_step(kind, dtype, cell):
    params, x, grad_y = small_problem(cell)
    variant = get_variant(f"torch-{cell}-{kind}", dtype=dtype)
    lr = 0.1
    runner = variant.runner(params, x, grad_y, lr=lr)
    runner.step()
    runner.sync()
    weights = runner_weights(runner)
    expected = reference.vjp(params, x, grad_y)
    for name in PARAM_NAMES:
        # Float32 master weights under autocast: the update itself loses nothing here.
        grad = (params[name] - weights[name]) / lr
        assert max_rel_error(grad, expected[name]) <= TOLERANCES[dtype], name


@pytest.mark.parametrize("kind", ["cell", "nn"])
def test_runner_steps_start_from_fresh_gradients(kind, cell):
    """The second step is one SGD step from the first's weights: no gradient carried over."""
    params, x, grad_y = small_problem(cell)
    lr = 0.1
    runner = get_variant(f"torch-{cell}-{kind}", dtype="float64").runner(params, x, grad_y, lr)
    runner.step()
    # copies: a float64 CPU parameter's numpy view would follow the second update
    after_one = {name: w.copy() for name, w in runner_weights(runner).items()}
    runner.step()
    after_two = runner_weights(runner)
    expected = reference.vjp(after_one, x, grad_y)
    for name in PARAM_NAMES:
        grad = (after_one[name] - after_two[name]) / lr
        assert max_rel_error(grad, expected[name]) <= TOLERANCES["float64"], name


def test_runner_step_leaves_torch_dynamo_unimported():
    """The step's plain SGD update costs no torch._dynamo import (torch.optim's would: ~2 s
    per profile process)."""
    script = (
        "import sys, numpy as np\n"
        "from rnnopt import get_variant\n"
        "from rnnopt.measure.harness import make_inputs\n"
        "from rnnopt.models.flops import Shape\n"
        "params, x, grad_y = make_inputs('lstm', Shape(2, 3, 4, 5), 0)\n"
        "runner = get_variant('torch-lstm-nn', dtype='float32').runner(params, x, grad_y)\n"
        "runner.step()\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    assert fresh_python(script) == ["False"]


@pytest.mark.parametrize("kind", KINDS)
def test_runner_backward_after_forward_gives_the_gradients(kind, cell):
    params, x, grad_y = small_problem(cell)
    variant = get_variant(f"torch-{cell}-{kind}", dtype="float64")
    runner = variant.runner(params, x, grad_y)
    runner.forward()
    runner.backward()
    module_params = dict(runner.module.named_parameters())
    expected = reference.vjp(params, x, grad_y)
    for ours, theirs in variant.param_names.items():
        grad = module_params[theirs].grad.numpy()
        assert max_rel_error(grad, expected[ours]) <= TOLERANCES["float64"], ours


def test_jit_records_the_deprecation_instead_of_warning():
    params, x, _ = small_problem("lstm")
    variant = get_variant("torch-lstm-jit")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # anything that escapes to stderr fails the test
        variant.forward(params, x)
        variant.forward(params, x)
    assert any("torch.jit.script` is deprecated" in note for note in variant.notes)
    assert len(variant.notes) == len(set(variant.notes))


def test_float16_on_cpu_is_refused_with_the_alternatives():
    with pytest.raises(UserError, match="available: float64, float32, bfloat16"):
        get_variant("torch-lstm-nn", dtype="float16")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this host has CUDA")
def test_cuda_without_a_gpu_is_unavailable():
    with pytest.raises(UnavailableError, match="no CUDA device"):
        get_variant("torch-lstm-nn", device="cuda")


def test_cuda_with_device_files_but_no_gpu_for_torch_is_unavailable(monkeypatch):
    """Device files present (a container, a driver without a usable GPU): torch decides."""
    import rnnopt.models.variants

    monkeypatch.setattr(rnnopt.models.variants, "gpu_device_files", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UnavailableError, match="no CUDA device"):
        get_variant("torch-lstm-nn", device="cuda")


def test_cuda_without_gpu_device_files_is_skipped_without_importing_torch(tmp_path):
    """A CUDA job on a CPU host (or node) writes its skipped records without paying torch's
    import (2-3 s)."""
    from rnnopt.models.variants import gpu_device_files

    if gpu_device_files():
        pytest.skip("this host has GPU device files")
    out = tmp_path / "{phase}.json"
    script = (
        "import sys\n"
        "from rnnopt.cli import main\n"
        f"code = main(['profile', '--variant', 'torch-lstm-nn', '--device', 'cuda', '--batch', '2',"
        f" '--seq-len', '3', '--input-size', '4', '--hidden-size', '5', '--threads', '1',"
        f" '--phase', 'forward', 'step', '--out', {str(out)!r}])\n"
        "print(code, 'torch' in sys.modules)\n"
    )
    assert fresh_python(script)[-2:] == ["0", "False"]
    for phase in ("forward", "step"):
        record = json.loads((tmp_path / f"{phase}.json").read_text())
        assert record["status"] == "skipped" and "no CUDA device" in record["reason"]


def test_compile_reuses_its_graphs_for_a_repeated_shape():
    from torch._dynamo.utils import counters

    variant = get_variant("torch-rnn-compile")
    variant.vjp(*small_problem("rnn"))
    graphs = counters["stats"]["unique_graphs"]
    for seq_len in (5, 9):  # the step's shapes do not depend on T
        variant.vjp(*small_problem("rnn", seq_len=seq_len))
    assert counters["stats"]["unique_graphs"] == graphs


def test_tfloat32_is_a_cuda_dtype():
    with pytest.raises(UserError, match="tfloat32 on cpu; available: float64, float32, bfloat16"):
        get_variant("torch-lstm-nn", dtype="tfloat32")


def test_building_a_layer_sets_tf32_for_tfloat32_and_ieee_for_float32():
    from rnnopt.models.variants.torch_nn import TorchNN

    params, _, _ = small_problem("lstm")
    try:
        TorchNN(cell="lstm", dtype="tfloat32").module(params)
        assert torch.backends.cuda.matmul.fp32_precision == "tf32"
        assert torch.backends.cudnn.rnn.fp32_precision == "tf32"
    finally:
        TorchNN(cell="lstm", dtype="float32").module(params)
    assert torch.backends.cuda.matmul.fp32_precision == "ieee"
    assert torch.backends.cudnn.rnn.fp32_precision == "ieee"


@needs_cuda
def test_cuda_tfloat32_rounds_the_gemm_operands():
    """TF32 really on: the cell loop's cuBLAS GEMMs (K = 256) drift well past IEEE float32's
    error, and stay within TF32's tolerance."""
    from rnnopt.models import reference
    from rnnopt.models.params import init_params

    params = init_params("lstm", 256, 256, seed=0)
    x = torch.randn(8, 5, 256, generator=torch.Generator().manual_seed(0)).double().numpy()
    expected = reference.forward(params, x)
    errors = {
        dtype: max_rel_error(
            get_variant("torch-lstm-cell", dtype=dtype, device="cuda").forward(params, x),
            expected,
        )
        for dtype in ("float32", "tfloat32")
    }
    assert errors["float32"] < 1e-5 < errors["tfloat32"] <= TOLERANCES["tfloat32"], errors


def test_an_autocast_layer_that_ran_in_another_dtype_is_noted():
    from rnnopt.models.variants.torch_base import note_ran_as

    variant = get_variant("torch-lstm-nn", dtype="bfloat16")
    note_ran_as(variant, torch.bfloat16)
    assert variant.notes == []
    note_ran_as(variant, torch.float16)  # what CUDA's autocast did to nn.LSTM under bf16
    assert variant.notes == ["autocast bfloat16 ran the layer in float16 (its output dtype)"]
    float32 = get_variant("torch-lstm-nn", dtype="float32")
    note_ran_as(float32, torch.float32)
    assert float32.notes == []
