"""The analytic FLOP and byte models, checked by hand on one small shape."""

import pytest

from rnnopt.measure.host import native_bf16
from rnnopt.measure.peak import ceiling_of, theoretical_gflops
from rnnopt.models.flops import (
    Shape,
    derived_metrics,
    flop_count,
    memory_model,
    param_count,
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


def test_ceiling_is_the_best_library_of_the_dtype():
    record = {
        "metrics": {
            "gemm_gflops": {
                "numpy": {"float32": 100.0, "float64": 45.0},
                "torch": {"float32": 74.0, "float64": 50.0, "bfloat16": 300.0},
                "cuda": {"float32": 50000.0, "tfloat32": 400000.0},
            }
        }
    }
    assert ceiling_of(record, "cpu", "float32") == {
        "gflops": 100.0,
        "library": "numpy",
        "dtype": "float32",
    }
    assert ceiling_of(record, "cpu", "float64")["library"] == "torch"
    assert ceiling_of(record, "cpu", "bfloat16")["gflops"] == 300.0
    assert ceiling_of(record, "cuda", "float32")["gflops"] == 50000.0  # IEEE, never TF32
    assert ceiling_of(record, "cpu", "float16") is None


def test_unknown_phase():
    with pytest.raises(ValueError, match="unknown phase"):
        flop_count("lstm", SHAPE, "inference")


CPUINFO = """processor\t: 0
vendor_id\t: {vendor}
cpu family\t: {family}
cpu MHz\t\t: 2500.000
flags\t\t: fpu sse2 {flags}

processor\t: 1
cpu MHz\t\t: 9999.000
"""


@pytest.mark.parametrize(
    "vendor, family, flags, bits",
    [
        ("AuthenticAMD", 25, "avx2 fma avx512f", 256),  # Zen 4: AVX-512 on 256-bit halves
        ("AuthenticAMD", 26, "avx2 fma avx512f", 512),  # Zen 5
        ("GenuineIntel", 6, "avx2 fma avx512f", 512),
        ("AuthenticAMD", 23, "avx2 fma", 256),
        ("GenuineIntel", 6, "sse4_2", 128),
    ],
)
def test_theoretical_fma_peak(vendor, family, flags, bits):
    text = CPUINFO.format(vendor=vendor, family=family, flags=flags)
    peak = theoretical_gflops(2, text, cores=2)
    assert peak["datapath_bits"] == bits
    # 2 threads x 2.5 GHz x 2 pipes x 2 FLOPs x lanes; the first processor's clock only
    assert peak["float32"] == pytest.approx(2 * 2.5 * 2 * 2 * bits / 32)
    assert peak["float64"] == pytest.approx(peak["float32"] / 2)
    assert theoretical_gflops(1, "processor\t: 0\nflags\t: avx2\n") == {}
    # a thousand threads on two cores have two cores' FMA units (issue 23, item 13)
    assert theoretical_gflops(1000, text, cores=2) == peak and peak["cores_counted"] == 2


@pytest.mark.parametrize(
    "flags, native",
    [
        ("avx2 fma avx512f avx512_bf16", True),  # Zen 4, Cooper Lake and later
        ("avx2 fma avx512f amx_bf16 amx_tile", True),  # Sapphire Rapids
        ("avx2 fma avx512f", False),  # Skylake-SP: AVX-512 without BF16
        ("avx2 fma", False),  # Zen 3: emulated
    ],
)
def test_native_bf16_from_the_cpu_flags(flags, native):
    text = CPUINFO.format(vendor="AuthenticAMD", family=25, flags=flags)
    assert native_bf16(text) is native


def test_native_bf16_on_arm_reads_features():
    assert native_bf16("processor\t: 0\nFeatures\t: fp asimd bf16 i8mm\n") is True
    assert native_bf16("processor\t: 0\nFeatures\t: fp asimd\n") is False


def test_a_gemm_slower_than_the_time_budget_is_timed_by_its_first_call(monkeypatch):
    import time

    import rnnopt.measure.peak

    calls = []

    def slow_gemm(library, dtype, size, layout="nn", seed=0):
        return (lambda: (calls.append(size), time.sleep(0.02))), (lambda: None)

    monkeypatch.setattr(rnnopt.measure.peak, "gemm_call", slow_gemm)
    result = rnnopt.measure.peak.measure_gemm("torch", "bfloat16", 64, min_time_s=0.01)
    assert calls == [64] and result["calls"] == 1
    assert result["time_ms"] >= 20
    assert result["gflops"] == pytest.approx(2 * 64**3 / (result["time_ms"] / 1e3) / 1e9)
