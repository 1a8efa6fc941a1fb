"""A spinning barrier for a team of threads that meet once per time step.

threading.Barrier puts the early threads to sleep on a condition variable; waking one takes a
futex call and a scheduler pass, tens of microseconds on these VMs, against 40-800 us of work
per step (rnnopt.models.variants.numpy_persistent). Here a waiting thread spins on a shared
counter instead, outside the GIL (nogil), so the other threads run on. That is right when
every thread has a core of its own: the timing jobs own the CPU (the workflow's `timing`
resource), and the team never has more threads than the threads asked for. Where they do not
(tests with more threads than cores, a shared CI machine), a waiter that has spun
SPINS_BEFORE_YIELD times gives its core away with sched_yield on every further turn, so the
thread it waits for gets to run.

State: an int64 array of 3, [arrived, generation, abort]. The last thread to arrive resets
`arrived` and then bumps `generation`, which releases the others. `abort` set by any thread
(`abort()`, after an exception) releases every waiter with False, so a failing thread never
leaves the others spinning forever.

numba has no atomics for the CPU target; two intrinsics emit LLVM's atomic read-modify-write
and atomic load, without which the compiler may hoist the load out of the spin loop.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

ARRIVED, GENERATION, ABORT = 0, 1, 2
SPINS_BEFORE_YIELD = 1 << 14  # some 10-50 us of spinning on these CPUs
_sched_yield = types.ExternalFunction("sched_yield", types.int32())  # libc, always loaded


def _element_pointer(context, builder, array_type, array, index):
    array = context.make_array(array_type)(context, builder, array)
    return cgutils.get_item_pointer(context, builder, array_type, array, [index])


@intrinsic
def _atomic_add(typingctx, array, index, value):
    """array[index] += value atomically; returns the value before."""

    def codegen(context, builder, signature, args):
        pointer = _element_pointer(context, builder, signature.args[0], args[0], args[1])
        return builder.atomic_rmw("add", pointer, args[2], "seq_cst")

    return types.int64(array, index, value), codegen


@intrinsic
def _atomic_load(typingctx, array, index):
    """array[index], read with acquire ordering: never cached in a register."""

    def codegen(context, builder, signature, args):
        pointer = _element_pointer(context, builder, signature.args[0], args[0], args[1])
        return builder.load_atomic(pointer, "acquire", 8)

    return types.int64(array, index), codegen


@njit(nogil=True, cache=True)
def wait(state, threads):
    """Block until `threads` threads have called wait on `state`; False if aborted."""
    generation = _atomic_load(state, GENERATION)
    if _atomic_add(state, ARRIVED, 1) == threads - 1:
        _atomic_add(state, ARRIVED, -threads)
        _atomic_add(state, GENERATION, 1)
        return _atomic_load(state, ABORT) == 0
    spins = 0
    while _atomic_load(state, GENERATION) == generation:
        if _atomic_load(state, ABORT) != 0:
            return False
        spins += 1
        if spins > SPINS_BEFORE_YIELD:
            _sched_yield()
    return _atomic_load(state, ABORT) == 0


@njit(nogil=True, cache=True)
def abort(state):
    """Release every waiter of `state`, now and later, with False."""
    _atomic_add(state, ABORT, 1)


def new_state() -> np.ndarray:
    return np.zeros(3, dtype=np.int64)
