"""Memory instruments on small synthetic cases, and `rnnopt memory` end to end."""

import gc

import numpy as np
import pytest

from rnnopt.measure.counters import GcMonitor
from rnnopt.measure.heap import MIB, step_peak, tracked
from rnnopt.measure.memory import downsample_max, rss_profile, traced_call
from rnnopt.models.flops import Shape, memory_model
from rnnopt.records import read_record
from tests.measure_helpers import TINY, require_variant, run_cli


def test_downsample_keeps_peaks_and_bounds_length():
    times = [i / 1000 for i in range(2000)]
    values = [1.0] * 2000
    values[1234] = 9.0  # a one-sample peak
    kept_times, kept_values = downsample_max(times, values, max_points=500)
    assert len(kept_times) == len(kept_values) == 500
    assert max(kept_values) == 9.0
    assert kept_times == sorted(kept_times)
    assert downsample_max([0.0, 1.0], [3.0, 4.0]) == ([0.0, 1.0], [3.0, 4.0])


class Stepper:
    """A stand-in runner: `fresh` allocates a buffer per step, `reuse` fills one workspace."""

    def __init__(self, steps, per_step_elements):
        self.steps, self.n = steps, per_step_elements
        self.workspace = np.empty((steps, per_step_elements))
        self.cache = None

    def fresh(self):
        self.cache = [np.full(self.n, float(t)) for t in range(self.steps)]

    def reuse(self):
        for t in range(self.steps):
            self.workspace[t].fill(float(t))
        self.cache = self.workspace


def test_traced_call_counts_buffers_per_step():
    stepper = Stepper(steps=10, per_step_elements=1000)
    stepper.fresh()  # a previous cache, replaced by the measured call: must not cancel out
    fresh = traced_call(stepper.fresh, stepper, seq_len=10)
    assert fresh["numpy_blocks_per_step"] == pytest.approx(1.0)
    assert fresh["numpy_bytes_per_step"] >= 8000
    assert fresh["peak_bytes_per_step"] >= 8000
    reuse = traced_call(stepper.reuse, stepper, seq_len=10)
    assert reuse["numpy_blocks_per_step"] == 0
    assert reuse["peak_bytes"] < 8000


def test_rss_profile_sees_a_large_allocation():
    def allocate():
        block = np.ones(64 * 2**20 // 8)  # 64 MiB, touched
        block.sum()

    rss = rss_profile([allocate, allocate], interval_s=0.001)
    assert rss["increment_mib"] > 32
    assert len(rss["series"]["call_end_t_s"]) == 2
    assert len(rss["series"]["rss_mib"]) == len(rss["series"]["rss_t_s"]) <= 500


def test_gc_monitor_counts_collections_only_while_active():
    with GcMonitor() as monitor:
        gc.collect()
        monitor.active = True
        gc.collect(0)
        gc.collect(2)
        monitor.active = False
        gc.collect()
    metrics = monitor.metrics()
    assert (metrics["gen0"], metrics["gen1"], metrics["gen2"]) == (1, 0, 1)
    assert metrics["pause_ms"] >= 0


def memory_record(tmp_path, variant, phase="forward", *extra):
    out = tmp_path / f"{variant}.json"
    argv = ["memory", "--variant", variant, *TINY, "--phase", phase, "--threads", "1"]
    assert run_cli(*argv, "--out", str(out), "--calls", "2", *extra) == 0
    record = read_record(out)
    assert record["status"] == "ok", record["reason"]
    return record


def test_inplace_forward_allocates_nothing_per_step_naive_does(tmp_path):
    require_variant("numpy-lstm-inplace")
    require_variant("numpy-lstm-naive")
    inplace = memory_record(tmp_path, "numpy-lstm-inplace")["metrics"]["tracemalloc"]
    naive = memory_record(tmp_path, "numpy-lstm-naive")["metrics"]["tracemalloc"]
    assert inplace["numpy_blocks_per_step"] < 0.5
    assert naive["numpy_blocks_per_step"] >= 1


def test_memory_record_fields(tmp_path):
    record = memory_record(tmp_path, "torch-lstm-nn", "step")
    metrics = record["metrics"]
    assert record["peak_source"] == "memray"
    assert metrics["peak_mib"] == metrics["heap"]["peak_mib"]
    assert metrics["kept_mib"] == metrics["heap"]["kept_mib"] <= metrics["peak_mib"]
    assert metrics["minimum_mib"] == metrics["analytic"]["minimum_bytes"] / 2**20
    assert metrics["peak_over_minimum"] == pytest.approx(
        metrics["peak_mib"] / metrics["minimum_mib"]
    )
    assert set(record["series"]) == {"rss_t_s", "rss_mib", "call_end_t_s"}
    assert len(record["series"]["call_end_t_s"]) == 3  # the first call and --calls 2
    assert any("tracemalloc" in note for note in record["notes"])


def test_tracked_sees_a_buffer_freed_inside_the_window_and_one_kept():
    def call():
        temporary = np.ones(4 * 2**20 // 8)  # 4 MiB, freed before the window ends
        del temporary
        return np.ones(2**20 // 8)  # 1 MiB, alive at the end

    heap, kept = tracked(call)
    assert 4 * MIB <= heap["peak_bytes"] < 4.5 * MIB
    assert 1 * MIB <= heap["kept_bytes"] < 1.2 * MIB
    assert kept.nbytes == MIB


HEAP_SHAPE = Shape(batch=8, seq_len=12, input_size=16, hidden_size=32)


@pytest.mark.parametrize("phase", ["forward", "step"])
def test_fused_peak_covers_the_workspaces_it_allocates(phase):
    """The instrument sees numpy's buffers: at least the nbytes of every workspace array."""
    import rnnopt.measure.heap as heap_module
    from rnnopt.measure.harness import make_inputs
    from rnnopt.models.variants import get_variant

    params, x, grad_y = make_inputs("lstm", HEAP_SHAPE, 0)
    variants = []

    def make_runner():
        variants.append(get_variant("numpy-lstm-fused", dtype="float32"))
        return variants[-1].runner(params, x, grad_y, 1e-3)

    measured = heap_module.step_peak_of(make_runner, phase)
    fresh = variants[-1]
    buffer_sets = [v._arrays for v in vars(fresh).values() if getattr(v, "_arrays", None)]
    workspaces = [a for b in buffer_sets for a in vars(b).values() if isinstance(a, np.ndarray)]
    assert workspaces, "the fused variant keeps its workspaces on itself"
    assert measured["peak_mib"] * MIB >= sum(a.nbytes for a in workspaces)


@pytest.mark.parametrize(
    "variant",
    [
        "numpy-lstm-naive",
        "numpy-lstm-inplace",
        "numpy-lstm-batched",
        "numpy-lstm-fused",
        "torch-lstm-cell",
        "torch-lstm-nn",
        "numpy-rnn-fused",
        "torch-rnn-nn",
    ],
)
@pytest.mark.parametrize("phase", ["forward", "step"])
def test_no_peak_below_the_analytic_bptt_minimum(variant, phase):
    measured = step_peak(variant, "float32", "cpu", HEAP_SHAPE, phase)
    minimum = memory_model(variant.split("-")[1], HEAP_SHAPE, "float32", phase)
    assert measured["instrument"] == "memray"
    assert measured["peak_mib"] * MIB >= minimum["minimum_bytes"]
