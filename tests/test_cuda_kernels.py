"""rnnopt.measure.cuda_kernels: the kernel summary of a CUDA step (the profiler needs a GPU)."""

import pytest
import torch

from rnnopt.measure.cuda_kernels import kernel_metrics, step_kernels


def test_kernels_ranked_by_time_with_shares_and_the_persistent_kernel_named():
    kernels = {
        "ampere_sgemm_128x64_nn": {"us": 600.0, "count": 100},
        "void RNN_blockPersist_fp_LSTM<float, float>(...)": {"us": 300.0, "count": 1},
        "elementwise_kernel": {"us": 100.0, "count": 300},
    }
    metrics = kernel_metrics(kernels, top=2)
    assert metrics["cuda_kernel_ms"] == pytest.approx(1.0)
    assert metrics["cuda_kernel_launches"] == 401
    assert [k["name"] for k in metrics["cuda_kernels"]] == list(kernels)[:2]
    assert [k["share"] for k in metrics["cuda_kernels"]] == pytest.approx([0.6, 0.3])
    assert metrics["cudnn_persistent"] is True
    del kernels["void RNN_blockPersist_fp_LSTM<float, float>(...)"]
    assert kernel_metrics(kernels)["cudnn_persistent"] is False


def test_a_profiler_failure_leaves_a_note_not_an_error():
    class Broken:
        def sync(self):
            raise RuntimeError("CUPTI unavailable")

    metrics, note = step_kernels(Broken())
    assert metrics == {} and note == "no kernel profile: RuntimeError: CUPTI unavailable"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_step_kernels_of_the_library_layer():
    from rnnopt import get_variant
    from tests.conftest import small_problem

    params, x, grad_y = small_problem("lstm")
    runner = get_variant("torch-lstm-nn", device="cuda").runner(params, x, grad_y)
    metrics, note = step_kernels(runner)
    assert note is None, note
    assert metrics["cuda_kernel_launches"] > 0 and metrics["cuda_kernel_ms"] > 0
    assert sum(k["share"] for k in metrics["cuda_kernels"]) <= 1 + 1e-9
