"""The analytic FLOP and byte models, checked by hand on one small shape."""

import pytest

from rnnopt.flops import (
    Shape,
    derived_metrics,
    flop_count,
    memory_model,
    param_count,
    peak_key,
)

# T=2, B=3, I=4, H=5: T*B*H = 30 hidden units over the sequence, T*B*I = 24 inputs.
SHAPE = Shape(batch=3, seq_len=2, input_size=4, hidden_size=5)


def test_param_count_by_hand():
    assert param_count("lstm", 4, 5) == 20 * 4 + 20 * 5 + 2 * 20  # 220
    assert param_count("rnn", 4, 5) == 5 * 4 + 5 * 5 + 2 * 5  # 55


def test_lstm_flops_by_hand():
    forward = flop_count("lstm", SHAPE, "forward")
    assert forward["gemm"] == 2 * 2 * 3 * 4 * 5 * (4 + 5) == 2160
    assert forward["elementwise"] == 30 * 21
    assert forward["total"] == 2160 + 630
    backward = flop_count("lstm", SHAPE, "backward")
    assert backward["gemm"] == 2 * 2160
    assert backward["elementwise"] == 30 * 27
    step = flop_count("lstm", SHAPE, "step")
    assert step["update"] == 2 * 220
    assert step["total"] == 2160 + 630 + 4320 + 810 + 440


def test_rnn_flops_by_hand():
    forward = flop_count("rnn", SHAPE, "forward")
    assert forward["gemm"] == 2 * 2 * 3 * 1 * 5 * 9 == 540
    assert forward["elementwise"] == 30 * 4
    step = flop_count("rnn", SHAPE, "step")
    assert step["total"] == 540 + 120 + 1080 + 30 * 5 + 2 * 55


def test_lstm_memory_model_by_hand():
    forward = memory_model("lstm", SHAPE, "float32", "forward")
    # gates i, f, g, o and c per step (5*T*B*H) plus y (T*B*H): T*B*(4H + 2H) elements
    assert forward["saved_bytes"] == 5 * 30 * 4
    assert forward["outputs_bytes"] == 30 * 4
    assert forward["minimum_bytes"] == 6 * 30 * 4
    assert forward["grads_bytes"] == 0
    assert forward["inputs_bytes"] == 24 * 4
    backward = memory_model("lstm", SHAPE, "float32", "backward")
    assert backward["grads_bytes"] == backward["params_bytes"] == 220 * 4
    assert backward["outputs_bytes"] == (30 + 24) * 4  # y and dx
    assert backward["inputs_bytes"] == (24 + 30) * 4  # x and grad_y
    assert backward["minimum_bytes"] == 600 + 216 + 880


def test_rnn_memory_model_keeps_only_h():
    forward = memory_model("rnn", SHAPE, "float64", "forward")
    assert forward["saved_bytes"] == 0
    assert forward["minimum_bytes"] == 30 * 8  # T*B*H: h per step is y


def test_dtype_sizes_scale_the_model():
    full = memory_model("lstm", SHAPE, "float64", "step")["minimum_bytes"]
    half = memory_model("lstm", SHAPE, "bfloat16", "step")["minimum_bytes"]
    assert full == 4 * half


def test_derived_metrics():
    derived = derived_metrics("lstm", SHAPE, "forward", median_ms=1.0, peak_gflops=0.0279)
    assert derived["tokens_per_s"] == pytest.approx(6 / 1e-3)
    assert derived["gflops"] == pytest.approx(2790 / 1e-3 / 1e9)
    assert derived["peak_fraction"] == pytest.approx(0.1)
    assert "peak_fraction" not in derived_metrics("lstm", SHAPE, "forward", 1.0)


def test_peak_key_same_library_and_dtype():
    assert peak_key("numpy", "cpu", "float32") == "gemm_gflops.numpy.float32"
    assert peak_key("torch", "cpu", "bfloat16") == "gemm_gflops.torch.bfloat16"
    assert peak_key("torch", "cuda", "float16") == "gemm_gflops.cuda.float16"


def test_unknown_phase():
    with pytest.raises(ValueError, match="unknown phase"):
        flop_count("lstm", SHAPE, "inference")
