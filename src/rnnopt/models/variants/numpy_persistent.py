"""Persistent weights on a CPU (Diamos et al.'s persistent RNN): each thread owns a slice of
W_hh for the whole sequence and the threads meet once per step.

The numba rung's recurrent GEMM per step is one BLAS call that BLAS splits over its threads,
then one parallel kernel, which wakes a sleeping pool thread: two hand-offs per step, and every
thread reads rows of W_hh that change from call to call. Here the hidden units are split into
one contiguous range per thread, for the whole call:

- forward, thread k, units U_k: its rows of W_hh for all G gates, a (G*|U_k|, H) copy it
  made itself (first touch: its core's cache, where the slice fits), times h_{t-1} (H, B),
  then the gate arithmetic of its units (the numba kernels, serial, on that thread); then
  the barrier, because step t+1 reads every unit's h_t;
- backward, thread k: its columns of W_hh, W_hh[:, U_k]^T (|U_k|, G*H), times dz_{t+1}
  (G*H, B) gives dL/dh_t of its own units, then its units' gate derivatives; then the barrier.

One single-threaded BLAS call, one kernel call and one barrier per thread and step, the whole
loop one numba call per thread outside the GIL (rnnopt.models.variants.persistent_loops): the
threads never sleep between steps (rnnopt.models.variants.spin_barrier). The GEMMs that do not
depend on h are hoisted out of the loop as in the numba rung, and split over the same team:
each thread projects x for its own gate rows before the loop and, after it, computes dW_ih and
dW_hh of its rows and dx of its share of the time steps. No BLAS pool runs at all while the
team does: a multi-threaded BLAS call before the loop left OpenBLAS's pool spinning on the
core a team thread needed (a 2-thread forward took 182 ms instead of 138 ms, measured). The
layout (feature-major, (rows, T*B)) and the gate kernels are the numba rung's. The team is as
large as the threads in force (numba's count, which rnnopt.measure.threads sets with every
other pool); at 1 thread it is the numba rung's loop with the serial kernels.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from typing import NamedTuple

import numpy as np

from rnnopt.models.variants.numpy_common import PreallocatedNumpyVariant, time_major_shapes
from rnnopt.models.variants.numpy_fused import GemmSplitRunner

PARTS = ("gemm", "elementwise", "barrier")  # what a loop runs; fewer for the time split


class NumpyPersistent(PreallocatedNumpyVariant):
    kind = "persistent"
    techniques = (
        "batching",
        "preallocation",
        "hoisted-input-projection",
        "fused-elementwise",
        "persistent-weights",
    )
    summary = (
        "the numba rung's loop split by hidden units over a team of threads: each thread keeps "
        "its slice of W_hh for the whole sequence, runs its GEMM slice and its units' gate "
        "arithmetic, and the threads meet at one spinning barrier per step"
    )
    memory_note = (
        "the numba rung's feature-major workspaces, plus one copy of W_hh's rows and one of "
        "its columns split over the threads, kept on the variant"
    )
    compiles = True

    @cached_property
    def team(self) -> Team:
        """The thread team, sized by the threads in force at first use, kept for the variant's
        life (like the numba rung's kernel flavour)."""
        import numba

        return Team(numba.get_num_threads())

    @cached_property
    def loops(self):
        """The per-thread time loops; numba loads only for this variant. UnavailableError
        where numpy's BLAS exports no GEMM numba can call."""
        from rnnopt.models.variants import numpy_blas

        numpy_blas.load()  # before the loops' cached code, which calls into it, loads
        from rnnopt.models.variants import persistent_loops

        return persistent_loops

    @property
    def notes(self) -> list[str]:
        return [f"a team of {self.team.size} threads, one spinning barrier per step"]

    def runner(self, params, x, grad_y, lr=1e-3):
        return PersistentRunner(self, params, x, grad_y, lr)

    def forward_train(self, p, x, parts=PARTS):
        # Workspaces: numpy_common.time_major_shapes (the numba rung's), and per thread k:
        # weight_hh[k] (G*n_k, H), its rows of W_hh gate-major; recurrent[k] (G*n_k, B).
        # y (B, T, H) is a view of hs, valid until the next call.
        B, T, I = x.shape
        GH, H = p["weight_hh"].shape
        G, lstm = GH // H, self.cell == "lstm"
        units = self.units(H)
        ws = self._fwd.get(
            **time_major_shapes(B, T, I, H, GH, lstm),
            **{f"weight_hh{k}": (G * (j1 - j0), H) for k, (j0, j1) in enumerate(units)},
            **{f"recurrent{k}": (G * (j1 - j0), B) for k, (j0, j1) in enumerate(units)},
        )
        gemm, elementwise, meet = (part in parts for part in PARTS)
        if elementwise:
            np.add(p["bias_ih"], p["bias_hh"], out=ws.bias)  # the kernels add it
        loops, one = self.loops, self.np_dtype.type(1)
        W_hh = p["weight_hh"].reshape(G, H, H)
        X_steps = ws.X.reshape(T, B, I)

        def thread(k: int, barrier) -> None:
            j0, j1 = units[k]
            weights, recurrent = getattr(ws, f"weight_hh{k}"), getattr(ws, f"recurrent{k}")
            if elementwise:  # its share of the steps of x, read by every thread next
                t0, t1 = self.share(T, k)
                np.copyto(X_steps[t0:t1], x[:, t0:t1].transpose(1, 0, 2))
                if not barrier.wait():
                    return
            if gemm:  # its units' input projection
                for rows in self.gate_rows(H, k):
                    np.matmul(p["weight_ih"][rows], ws.X.T, out=ws.pre[rows])
            np.copyto(weights.reshape(G, j1 - j0, H), W_hh[:, j0:j1])
            recurrent.fill(0)  # h0 = 0: step 0 has no recurrent term
            if elementwise:
                ws.c[j0:j1] = 0
            loops.forward_loop(
                ws.pre, ws.bias, weights, recurrent, ws.c, ws.acts, ws.cs, ws.hs, j0, j1, lstm,
                gemm, elementwise, meet, barrier.state, barrier.threads, one,
            )  # fmt: skip

        self.team.run(thread)
        return ws.hs[:, B:].reshape(H, T, B).transpose(2, 1, 0), ws

    def backward(self, p, ws, grad_y, parts=PARTS):
        # grad_y (B, T, H); dz (G*H, T*B) over the forward's projection, as in the numba rung;
        # dc (H, B); x (T*B, I) time-major. Per thread k: weight_hh_t[k] (n_k, G*H) =
        # W_hh[:, U_k]^T, dh[k] (n_k, B). Returned grads are buffers (dx a view), valid until
        # the next call.
        B, T, H = grad_y.shape
        GH, I = p["weight_ih"].shape
        units = self.units(H)
        g = self._bwd.get(
            dc=(H, B),
            weight_ih=(GH, I),
            weight_hh=(GH, H),
            bias_ih=(GH,),
            bias_hh=(GH,),
            x=(T * B, I),
            **{f"weight_hh_t{k}": (j1 - j0, GH) for k, (j0, j1) in enumerate(units)},
            **{f"dh{k}": (j1 - j0, B) for k, (j0, j1) in enumerate(units)},
        )
        gemm, elementwise, meet = (part in parts for part in PARTS)
        loops, one, dz = self.loops, self.np_dtype.type(1), ws.pre
        lstm = self.cell == "lstm"
        h_prev = ws.hs[:, : T * B]

        def thread(k: int, barrier) -> None:
            j0, j1 = units[k]
            weights_t, dh = getattr(g, f"weight_hh_t{k}"), getattr(g, f"dh{k}")
            np.copyto(weights_t, p["weight_hh"][:, j0:j1].T)
            dh.fill(0)  # the last step has no dz_{t+1}
            if elementwise:
                g.dc[j0:j1] = 0
            if not loops.backward_loop(
                dz, weights_t, dh, g.dc, grad_y, ws.acts, ws.cs, ws.hs, j0, j1, lstm,
                gemm, elementwise, meet, barrier.state, barrier.threads, one,
            ):  # fmt: skip
                return
            # after the last barrier every row of dz is final: the weight gradients of its
            # own rows, and dx of its share of the steps (every row of dz, W_ih's columns)
            for rows in self.gate_rows(H, k):
                if gemm:
                    np.matmul(dz[rows], ws.X, out=g.weight_ih[rows])
                    np.matmul(dz[rows], h_prev.T, out=g.weight_hh[rows])
                if elementwise:
                    np.sum(dz[rows], axis=1, out=g.bias_ih[rows])
            t0, t1 = self.share(T, k)
            if gemm:
                np.matmul(dz[:, t0 * B : t1 * B].T, p["weight_ih"], out=g.x[t0 * B : t1 * B])

        self.team.run(thread)
        if elementwise:
            np.copyto(g.bias_hh, g.bias_ih)
        return {
            "weight_ih": g.weight_ih,
            "weight_hh": g.weight_hh,
            "bias_ih": g.bias_ih,
            "bias_hh": g.bias_hh,
            "x": g.x.reshape(T, B, I).transpose(1, 0, 2),
        }

    def share(self, n: int, k: int) -> tuple[int, int]:
        """Thread k's range of n items: contiguous, sizes differing by at most one."""
        return n * k // self.team.size, n * (k + 1) // self.team.size

    def units(self, H: int) -> list[tuple[int, int]]:
        """Each thread's hidden units [j0, j1)."""
        return [self.share(H, k) for k in range(self.team.size)]

    def gate_rows(self, H: int, k: int) -> list[slice]:
        """Thread k's rows of a (G*H, .) gate block: its units' range in every gate (one
        slice when that is every row, as at 1 thread: one GEMM instead of G)."""
        j0, j1 = self.share(H, k)
        if (j0, j1) == (0, H):
            return [slice(0, self.gates * H)]
        return [slice(gate * H + j0, gate * H + j1) for gate in range(self.gates)]


class Barrier(NamedTuple):
    """One team run's barrier: its state array (rnnopt.models.variants.spin_barrier) and size,
    for numba loops; `wait()` for Python code."""

    state: np.ndarray
    threads: int

    def wait(self) -> bool:
        from rnnopt.models.variants import spin_barrier

        return spin_barrier.wait(self.state, self.threads)


class Team:
    """`size` threads that run one function together: thread 0 is the caller, the others
    live in a pool for the team's life. numpy's BLAS runs single-threaded while they do (each
    thread makes its own BLAS calls), and at its former count outside."""

    def __init__(self, size: int):
        from threadpoolctl import ThreadpoolController

        self.size = size
        self._pool = ThreadPoolExecutor(size - 1, "rnnopt-team") if size > 1 else None
        self._blas = ThreadpoolController().select(user_api="blas")

    def run(self, thread) -> None:
        """thread(k, barrier) for k in 0 .. size-1 at once, barrier a `Barrier` whose wait
        returns False once any thread has failed (that thread should then return). The first
        exception is re-raised after every thread has returned."""
        from rnnopt.models.variants import spin_barrier

        barrier = Barrier(spin_barrier.new_state(), self.size)

        def guarded(k: int) -> None:
            try:
                thread(k, barrier)
            except BaseException:
                spin_barrier.abort(barrier.state)
                raise

        with self._blas.limit(limits=1):
            others = [self._pool.submit(guarded, k) for k in range(1, self.size)]
            try:
                guarded(0)
            finally:
                errors = [future.exception() for future in others]
        for error in errors:
            if error is not None:
                raise error


class PersistentRunner(GemmSplitRunner):
    """GemmSplitRunner's GEMM-only loops, plus the loops of GEMMs and barriers: their
    difference is the time the threads wait for each other (rnnopt.measure.split)."""

    def gemm_only(self, phase: str):
        return self._loop(phase, parts=("gemm",))

    def gemm_and_barrier(self, phase: str):
        """None for a team of one, whose barrier is a no-op."""
        if self.variant.team.size == 1:
            return None
        return self._loop(phase, parts=("gemm", "barrier"))
