"""The roofline placement: which roof binds a row, how much of it the row reaches."""

import pandas as pd
import pytest

from rnnopt.models.flops import Shape, flop_count
from rnnopt.models.traffic import step_working_set, traffic_bytes
from rnnopt.report.roofline import bound_text, level_of, place, roofline_points

CACHES = {"l1d_bytes": 32 * 2**10, "l2_bytes": 2**20, "l3_bytes": 32 * 2**20}
PEAK = pd.Series(
    {
        "run": "r",
        "threads": 1,
        "status": "ok",
        "gemm_gflops.numpy.float32": 90.0,
        "gemm_gflops.torch.float32": 100.0,
        "bandwidth_gbs.cpu.l1d.read": 150.0,
        "bandwidth_gbs.cpu.l1d.copy": 200.0,
        "bandwidth_gbs.cpu.l2.copy": 100.0,
        "bandwidth_gbs.cpu.l3.copy": 50.0,
        "bandwidth_gbs.cpu.dram.triad": 20.0,
    }
)


def row(variant, shape: Shape, gflops: float, phase="forward", dtype="float32"):
    return pd.Series(
        {
            "run": "r",
            "status": "ok",
            "variant": variant,
            "cell": "lstm",
            "dtype": dtype,
            "device": "cpu",
            "phase": phase,
            "threads": 1,
            **shape.as_dict(),
            "flops": flop_count("lstm", shape, phase)["total"],
            "gflops": gflops,
            **CACHES,
        }
    )


FASTRNNS = Shape(64, 100, 512, 512)
# B=1: the recurrence is a matrix-vector product, 2 FLOPs per 4-byte weight read
VECTOR = Shape(1, 100, 512, 512)


def test_a_large_batch_is_bound_by_compute():
    placed = place(row("numpy-lstm-fused", FASTRNNS, 80.0), PEAK)
    traffic = traffic_bytes("fused", "lstm", FASTRNNS, "float32", "forward")["total"]
    assert placed["intensity"] == pytest.approx(
        flop_count("lstm", FASTRNNS, "forward")["total"] / traffic
    )
    assert placed["memory_level"] == "l3"  # 8 MiB of weights: beyond L2, inside L3
    assert placed["ceiling_gflops"] == 100.0  # the best library, not numpy's own
    assert placed["bandwidth_gbs"] == 50.0
    assert placed["bound_by"] == "compute" and placed["roof_fraction"] == pytest.approx(0.8)


def test_a_matrix_vector_recurrence_is_bound_by_bandwidth():
    flops = flop_count("lstm", VECTOR, "forward")["total"]
    intensity = flops / traffic_bytes("fused", "lstm", VECTOR, "float32", "forward")["total"]
    assert intensity < 2  # every weight read once a step for 2 FLOPs (4 bytes each)
    placed = place(row("numpy-lstm-fused", VECTOR, 0.8 * intensity * 50.0), PEAK)
    assert placed["bound_by"] == "bandwidth (L3)"
    assert placed["attainable_gflops"] == pytest.approx(intensity * 50.0)
    assert placed["roof_fraction"] == pytest.approx(0.8)


def test_far_below_every_roof_is_overhead():
    placed = place(row("numpy-lstm-fused", FASTRNNS, 10.0), PEAK)
    assert placed["bound_by"] == "overhead" and placed["roof_fraction"] == pytest.approx(0.1)
    assert bound_text(placed["bound_by"], placed["roof_fraction"]) == "overhead, 10% of roof"
    above = bound_text("compute", 1.2)
    assert above.startswith("compute, 120% of roof (above the roof: the traffic model")


def test_levels_follow_the_working_set_and_unknown_caches_place_nothing():
    small = Shape(16, 20, 32, 64)
    working_set = step_working_set("lstm", small, "float32")
    assert level_of(working_set, CACHES, "cpu") == "l2"
    assert level_of(10**12, CACHES, "cpu") == "dram"
    assert level_of(1, {}, "cpu") is None and level_of(1, {}, "cuda") == "dram"
    unknown = row("numpy-lstm-fused", small, 5.0).drop(list(CACHES))
    placed = place(unknown, PEAK)
    assert placed["memory_level"] is None and placed["bound_by"] is None


def test_points_use_the_peak_of_the_same_run_and_thread_count():
    profile = pd.DataFrame([row("numpy-lstm-fused", FASTRNNS, 80.0)])
    two_threads = pd.DataFrame([{**PEAK.to_dict(), "threads": 2}])
    assert roofline_points(profile, two_threads)["bound_by"].isna().all()
    points = roofline_points(profile, pd.DataFrame([PEAK]))
    assert list(points["bound_by"]) == ["compute"]
