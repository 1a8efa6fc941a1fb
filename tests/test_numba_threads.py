"""numpy-{rnn,lstm}-numba and numba's threads: numba's pool follows --threads; at 1 thread the
variant runs serial kernels, so a step wakes no pool thread (whose wake-up cost depended on
whether the other core was busy), and at more it runs parallel ones on the workqueue layer."""

import json
import os
import platform
import re
from contextlib import contextmanager

import numba
import pytest
from numba import njit

import rnnopt
from rnnopt.measure.threads import apply_threads, effective_threads, threads_match
from rnnopt.models.variants.numba_kernels import PARALLEL, SERIAL, kernels_for
from tests.conftest import fresh_python, small_problem
from tests.measure_helpers import kept_threads

# A fresh process, numba loaded after the threads are set as in a measurement process: runs
# both cells' vjp at `threads` (None: as is) or `flavour`, and prints the flavours that ran,
# numba's threads, NUMBA_NUM_THREADS and how often numba's pool threads were woken meanwhile
# (context switches): each parallel kernel wakes one, a serial kernel none.
RUN_VARIANTS = """
import json, os, time
os.environ["NUMBA_CACHE_DIR"] = {cache_dir!r}
import rnnopt
from rnnopt.measure.harness import make_inputs
from rnnopt.measure.threads import apply_threads
from rnnopt.models.flops import Shape
threads, flavour = {threads!r}, {flavour!r}
if threads is not None:
    apply_threads(threads, use_torch=False)
tasks = set(os.listdir("/proc/self/task"))
from rnnopt.models.variants import numba_kernels
numba_kernels.kernels_for()  # starts numba's pool, as the variant's choice of flavour does
pool = set(os.listdir("/proc/self/task")) - tasks
time.sleep(0.2)  # let the pool threads settle into their wait


def wakeups():
    return sum(
        int(line.split()[1])
        for task in pool
        for line in open(f"/proc/self/task/{{task}}/status")
        if line.split(":")[0].endswith("ctxt_switches")
    )


before = wakeups()
flavours = []
for cell in ("rnn", "lstm"):
    variant = rnnopt.get_variant(f"numpy-{{cell}}-numba")
    if flavour is not None:
        variant.kernels = getattr(numba_kernels, flavour.upper())
    variant.vjp(*make_inputs(cell, Shape(3, 5, 4, 6), seed=0))
    flavours.append(variant.kernels.flavour)
import numba
env = os.environ.get("NUMBA_NUM_THREADS")
print(json.dumps([flavours, numba.get_num_threads(), env, len(pool), wakeups() - before]))
"""


def run_variants(cache_dir, threads=None, flavour=None) -> list:
    script = RUN_VARIANTS.format(cache_dir=str(cache_dir), threads=threads, flavour=flavour)
    return json.loads(" ".join(fresh_python(script)))


@contextmanager
def kept_numba_threads():
    """kept_threads, and numba's thread count too."""
    before = numba.get_num_threads()
    try:
        with kept_threads():
            yield
    finally:
        numba.set_num_threads(before)


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="reads Linux's /proc")
def test_one_thread_runs_serial_kernels_and_never_wakes_the_pool(tmp_path):
    # The parallel flavour runs first into the same kernel cache: numba's cache does not key
    # on jit options, so a shared cache entry would hand the serial run parallel code.
    flavours, _, _, pool_threads, wakeups = run_variants(tmp_path, flavour="parallel")
    assert flavours == ["parallel", "parallel"] and pool_threads >= 1
    assert wakeups >= 10  # 5 steps forward and backward, twice: the count sees launches
    # numba sizes its pool from NUMBA_NUM_THREADS, set before it loads
    flavours, numba_threads, env, pool_threads, wakeups = run_variants(tmp_path, threads=1)
    assert flavours == ["serial", "serial"]
    assert (numba_threads, env, pool_threads, wakeups) == (1, "1", 1, 0)


def test_flavour_follows_the_thread_count():
    assert kernels_for(1) is SERIAL and kernels_for(2) is PARALLEL
    assert (SERIAL.flavour, PARALLEL.flavour) == ("serial", "parallel")
    assert not any(kernel.targetoptions["parallel"] for kernel in SERIAL[1:])
    assert all(kernel.targetoptions["parallel"] for kernel in PARALLEL[1:])


@pytest.mark.parametrize("threads", [1, 2])
def test_variant_takes_the_flavour_of_the_numba_threads_in_force(cell, threads):
    if threads > numba.config.NUMBA_NUM_THREADS:
        pytest.skip(f"numba's pool has {numba.config.NUMBA_NUM_THREADS} thread(s)")
    with kept_numba_threads():
        apply_threads(threads, use_torch=False)
        variant = rnnopt.get_variant(f"numpy-{cell}-numba")
        assert variant.kernels is kernels_for(threads)
        apply_threads(3 - threads, use_torch=False)
        assert variant.kernels is kernels_for(threads)  # kept for the variant's life
    assert variant.notes[0].startswith(f"ran the {kernels_for(threads).flavour} numba kernels")


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="reads x86 assembly")
def test_serial_float32_kernels_vectorise_the_division_of_tanh():
    # numba's default error model checks each division for a zero divisor: a branch that kept
    # these loops scalar. Compiled afresh, since numba cannot show cached code's assembly.
    for cell in ("rnn", "lstm"):
        variant = rnnopt.get_variant(f"numpy-{cell}-numba", dtype="float32")
        variant.kernels = SERIAL
        variant.vjp(*small_problem(cell))
    for kernel in (SERIAL.lstm_forward_step, SERIAL.lstm_backward_step, SERIAL.rnn_forward_step):
        options = {k: v for k, v in kernel.targetoptions.items() if k != "nopython"}
        fresh = njit(**options)(kernel.py_func)
        signature = next(s for s in kernel.signatures if str(s[0].dtype) == "float32")
        fresh.compile(signature)
        assert re.search(r"\bv?divps\b", fresh.inspect_asm(signature)), kernel.py_func.__name__


def test_loaded_numba_threads_follow_the_requested_count():
    # before numba loads, NUMBA_NUM_THREADS sizes its pool (the fresh process above)
    with kept_numba_threads():
        apply_threads(1, use_torch=False)
        assert numba.get_num_threads() == 1
        info = effective_threads(1)
    assert info["numba"] == 1 and threads_match(info)
    assert not threads_match({**info, "numba": 2})


def test_parallel_kernels_run_on_the_sleeping_workqueue_layer(cell):
    # OpenMP's spin-waiting threads starve OpenBLAS's between GEMMs (numba_kernels)
    variant = rnnopt.get_variant(f"numpy-{cell}-numba")
    variant.kernels = PARALLEL
    variant.forward(*small_problem(cell)[:2])
    assert numba.threading_layer() == "workqueue"
