"""A run is named from the hardware (rnnopt.measure.host), the contention around a timing loop
is measured (rnnopt.measure.contention), and one run never merges two machines (aggregate)."""

import re

import pytest

from rnnopt.errors import UserError
from rnnopt.measure.contention import Contention, steal_fraction
from rnnopt.measure.host import (
    cpu_governor,
    cpu_mhz,
    default_run_name,
    fingerprint,
    hardware_fingerprint,
    hardware_id,
    model_slug,
)
from rnnopt.records import make_record, write_record
from rnnopt.report.aggregate import collect
from tests.test_aggregate import ENV as AGGREGATE_ENV

CPUINFO = """\
processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC 7B13 64-Core Processor
stepping\t: 1
cpu MHz\t\t: 2400.000
flags\t\t: fpu sse2 avx2 fma

processor\t: 1
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B13 64-Core Processor
cpu MHz\t\t: 2600.000
flags\t\t: fpu sse2 avx2 fma
"""


def hardware(cpuinfo=CPUINFO, gpu_names=()):
    return hardware_fingerprint(cpuinfo, cpu_count=2, gpu_names=list(gpu_names))


def test_a_cpu_run_is_named_after_the_model_and_the_hardware_id():
    found = hardware()
    assert found["vendor"] == "AuthenticAMD" and found["family"] == "25"
    assert found["flags"] == ["avx2", "fma", "fpu", "sse2"]
    name = default_run_name(found)
    assert re.fullmatch(r"cpu-amd-epyc-7b13-[0-9a-f]{8}", name), name
    assert name.endswith(hardware_id(found))


def test_a_gpu_run_is_named_after_the_gpu():
    name = default_run_name(hardware(gpu_names=["NVIDIA H200"]))
    assert re.fullmatch(r"cuda-nvidia-h200-[0-9a-f]{8}", name), name


def test_the_model_slug_drops_trademarks_clock_and_filler():
    assert model_slug("Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz") == (
        "intel-xeon-platinum-8481c"
    )


def test_the_id_follows_the_flags_and_nothing_else_of_the_host():
    other_flags = CPUINFO.replace("avx2 fma", "avx2 avx512f fma")
    reordered = CPUINFO.replace("sse2 avx2 fma", "fma avx2 sse2")
    assert hardware_id(hardware()) == hardware_id(hardware())
    assert hardware_id(hardware()) == hardware_id(hardware(reordered))
    assert hardware_id(hardware()) != hardware_id(hardware(other_flags))
    assert hardware_id(hardware()) != hardware_id(hardware(gpu_names=["NVIDIA H200"]))


def test_an_image_does_not_rename_the_run(monkeypatch):
    monkeypatch.delenv("RNNOPT_IMAGE", raising=False)
    outside = default_run_name()
    monkeypatch.setenv("RNNOPT_IMAGE", "rnnopt:cpu")
    assert default_run_name() == outside


def test_the_env_carries_the_hardware_and_its_state():
    env = fingerprint(include_torch=False)
    assert env["hardware_id"] == hardware_id()
    assert {"vendor", "family", "model", "stepping", "flags", "cpu_mhz", "governor"} <= set(env)
    assert env["loadavg"] is None or len(env["loadavg"]) == 3
    assert cpu_mhz(CPUINFO) == 2500.0 and cpu_mhz("") is None


def test_an_unreadable_governor_is_none(tmp_path):
    assert cpu_governor(tmp_path / "missing") is None
    (tmp_path / "scaling_governor").write_text("performance\n")
    assert cpu_governor(tmp_path / "scaling_governor") == "performance"


STAT = "cpu  {user} 0 100 {idle} 0 0 0 {steal} 5 0\ncpu0 1 2 3 4 5 6 7 8 9 10\nintr 1 2\n"


def test_steal_fraction_is_stolen_over_all_jiffies():
    before = STAT.format(user=1000, idle=8000, steal=0)
    after = STAT.format(user=1600, idle=8300, steal=100)
    assert steal_fraction(before, after) == pytest.approx(100 / 1000)
    assert steal_fraction(before, None) is None
    assert steal_fraction("intr 1 2\n", after) is None


def test_contention_measures_a_block(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text(STAT.format(user=0, idle=0, steal=0))
    with Contention(stat) as contention:
        sum(range(10_000))
        stat.write_text(STAT.format(user=150, idle=50, steal=50))
    metrics = contention.metrics()
    assert set(metrics) == {
        "loadavg_1m",
        "steal_fraction",
        "involuntary_ctx_switches",
        "voluntary_ctx_switches",
        "wall_s",
        "probe_before_ms",
        "probe_after_ms",
    }
    for key in ("involuntary_ctx_switches", "voluntary_ctx_switches"):
        assert isinstance(metrics[key], int) and metrics[key] >= 0
    assert metrics["steal_fraction"] == pytest.approx(50 / 250)
    assert metrics["wall_s"] >= 0
    assert metrics["probe_before_ms"] > 0 and metrics["probe_after_ms"] > 0


def test_the_speed_probe_times_its_work():
    """The probe's time grows with its work: it measures the CPU, not a constant."""
    from rnnopt.measure.contention import speed_probe_ms

    assert speed_probe_ms(loops=200_000, runs=3) > 5 * speed_probe_ms(loops=20_000, runs=3)


def test_contention_without_proc_stat_has_no_steal(tmp_path):
    with Contention(tmp_path / "missing") as contention:
        pass
    assert contention.metrics()["steal_fraction"] is None


ENV = AGGREGATE_ENV | {"hostname": "vm"}


def write_peak(results, run, name, env):
    record = make_record("peak", seed=0, config={}, metrics={"gflops": 1.0}, env=env)
    path = results / run / "peak" / f"{name}.json"
    write_record(path, record)
    return path


def test_one_run_of_two_machines_is_refused(tmp_path):
    results = tmp_path / "results"
    write_peak(results, "cpu-vm", "a", ENV | {"hardware_id": "aaaa1111"})
    write_peak(results, "cpu-vm", "b", ENV | {"hardware_id": "bbbb2222"})
    with pytest.raises(UserError, match=r"run 'cpu-vm'.*aaaa1111.*a\.json.*bbbb2222.*b\.json"):
        collect(results)


def test_older_records_and_other_runs_are_not_checked(tmp_path):
    results = tmp_path / "results"
    write_peak(results, "cpu-vm", "a", ENV | {"hardware_id": "aaaa1111"})
    write_peak(results, "cpu-vm", "old", ENV)
    write_peak(results, "cpu-other", "b", ENV | {"hardware_id": "bbbb2222"})
    metrics, _ = collect(results)
    assert sorted(set(metrics["run"])) == ["cpu-other", "cpu-vm"]
