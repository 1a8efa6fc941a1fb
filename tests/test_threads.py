"""Thread settings take effect in torch and every BLAS / OpenMP pool, and are reported."""

import os

import torch
from threadpoolctl import threadpool_info

from rnnopt.measure.threads import apply_threads, threads_match
from tests.measure_helpers import kept_threads


def test_apply_one_thread():
    with kept_threads():
        info = apply_threads(1)
        assert torch.get_num_threads() == 1
        assert all(pool["num_threads"] == 1 for pool in threadpool_info())
        assert os.environ["OMP_NUM_THREADS"] == "1"
    assert info["requested"] == 1 and info["torch"] == 1
    assert info["pools"] and all(pool["num_threads"] == 1 for pool in info["pools"])
    assert threads_match(info)


def test_mismatch_detected():
    info = {"requested": 2, "torch": 1, "pools": [{"num_threads": 2}]}
    assert not threads_match(info)
