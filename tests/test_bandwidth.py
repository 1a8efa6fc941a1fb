"""The bandwidth kernels compute what they claim (so the bytes they count are moved), and the
working sets follow the host's cache sizes."""

import pytest

from rnnopt.measure import bandwidth
from tests.conftest import fresh_python

CACHES = {"l1d": 32 * 2**10, "l2": 2**20, "l3": 32 * 2**20}


KERNEL_CHECK = """
import numpy as np
from rnnopt.measure import bandwidth
threads = {threads}
kernels = bandwidth._kernels(parallel=threads > 1)
a, b, c = np.arange(10.0), np.zeros(10), np.full(10, 2.0)
sums = np.zeros(threads)
kernels["read"](a, threads, 3, sums)
assert sums.sum() == 3 * a.sum()
kernels["write"](b, threads, 3, 0.5)
assert (b == 2.5).all()  # the last sweep wrote value + 2
kernels["copy"](a, b, threads, 2)
assert (b == a).all()
out = np.zeros(10)
kernels["triad"](out, a, c, 0.5, threads, 2)
assert (out == a + 0.5 * c).all()
print("ok")
"""


# Fresh interpreters: numba's thread pool is sized once per process, and other tests set
# NUMBA_NUM_THREADS in this one.
@pytest.mark.parametrize("threads", [1, 2])
def test_kernels_compute_their_results(threads):
    assert fresh_python(KERNEL_CHECK.format(threads=threads)) == ["ok"]


def test_working_sets_per_level():
    sets = bandwidth.working_sets(CACHES, threads=2)
    assert sets == {"l1d": 32 * 2**10, "l2": 2**20, "l3": 16 * 2**20, "dram": 256 * 2**20}
    assert bandwidth.working_sets({}, threads=1) == {"dram": bandwidth.DRAM_MIN_BYTES}
    assert bandwidth.working_sets({"l3": 256 * 2**20}, 1)["dram"] == 2**30


def test_measured_rates_are_positive_and_a_roof_is_the_best_kernel():
    words = fresh_python(
        "from rnnopt.measure import bandwidth\n"
        "m = bandwidth.measure_cpu({'l1d': 32768}, 1, min_time_s=0.001, log=lambda _: None)\n"
        "roofs = bandwidth.roofs(m['gbs'])\n"
        "print(sorted(m['gbs']) == ['dram', 'l1d'])\n"
        "print(all(v > 0 for level in m['gbs'].values() for v in level.values()))\n"
        "print(roofs['l1d'] == max(m['gbs']['l1d'].values()))\n"
        "_, moved = bandwidth.kernel_call('triad', 3 * 8 * 1000, threads=1)\n"
        "print(moved == bandwidth.BYTES_PER_CALL // (3 * 8 * 1000) * 3 * 8 * 1000)"
    )
    assert words == ["True", "True", "True", "True"]
    assert bandwidth.roofs({}) == {}
