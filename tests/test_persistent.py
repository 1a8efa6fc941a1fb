"""numpy-{rnn,lstm}-persistent: teams of 1-3 threads against the float64 reference, uneven
and empty unit ranges, its BLAS calls from numba, the spinning barrier, a failing thread,
and the time split with the barrier wait."""

import threading

import numpy as np
import pytest

import rnnopt
from rnnopt.measure.split import gemm_and_barrier_call, split_metrics
from rnnopt.models import reference
from rnnopt.models.variants import spin_barrier
from rnnopt.models.variants.numpy_persistent import Team
from tests.conftest import max_rel_error, small_problem
from tests.test_numpy_variants import SHAPES, TOLERANCE, assert_matches_reference

DTYPES = ["float64", "float32"]


def persistent(cell: str, dtype: str, threads: int):
    """The variant with a team of `threads`, whatever numba's thread count."""
    variant = rnnopt.get_variant(f"numpy-{cell}-persistent", dtype=dtype)
    variant.team = Team(threads)
    return variant


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matches_reference(dtype, cell, shape, threads):
    # SHAPES' hidden sizes 6, 6, 5, 3 split unevenly over 2 and 3 threads
    assert_matches_reference(persistent(cell, dtype, threads), cell, shape)


@pytest.mark.parametrize("dtype", DTYPES)
def test_more_threads_than_units(dtype, cell):
    # H=2 over 3 threads: one thread owns no unit, and still meets the others every step
    assert_matches_reference(persistent(cell, dtype, 3), cell, (3, 4, 2, 2))


@pytest.mark.parametrize("dtype", DTYPES)
def test_repeated_calls_and_shape_changes_start_clean(dtype, cell):
    variant = persistent(cell, dtype, 2)
    for seed, shape in enumerate([SHAPES[0], SHAPES[0], SHAPES[2], SHAPES[0], SHAPES[3]]):
        assert_matches_reference(variant, cell, shape, seed)


def test_training_steps_match_the_numba_rung(cell):
    # same maths, same order of the per-step GEMM sums: a few SGD steps agree to rounding
    params, x, grad_y = small_problem(cell, batch=4, seq_len=6, input_size=5, hidden_size=8)
    runners = [
        persistent(cell, "float64", 2).runner(params, x, grad_y, lr=0.1),
        rnnopt.get_variant(f"numpy-{cell}-numba", "float64").runner(params, x, grad_y, lr=0.1),
    ]
    for runner in runners:
        for _ in range(3):
            runner.step()
    for name, value in runners[1].p.items():
        assert max_rel_error(runners[0].p[name], value) <= 1e-12, name


@pytest.mark.parametrize("phase", ["forward", "backward"])
def test_gemm_only_loop_computes_the_gemms_and_writes_no_state(cell, phase):
    variant = persistent(cell, "float64", 2)
    params, x, grad_y = small_problem(cell, batch=3, seq_len=5, input_size=4, hidden_size=7)
    runner = variant.runner(params, x, grad_y)
    runner.forward()
    runner.backward()
    ws, (B, T, _), H = runner._cache, x.shape, params["weight_hh"].shape[1]
    hs_after = np.array(ws.hs)
    runner.gemm_only(phase)()
    np.testing.assert_array_equal(ws.hs, hs_after)  # no gate arithmetic ran
    W = runner.p["weight_hh"]
    for k, (j0, j1) in enumerate(variant.units(H)):
        rows = np.concatenate([np.arange(r.start, r.stop) for r in variant.gate_rows(H, k)])
        if phase == "forward":  # the last step's product, from numpy's BLAS called by numba
            expected = W[rows] @ ws.hs[:, (T - 1) * B : T * B]
            got = getattr(variant._fwd._arrays, f"recurrent{k}")
        else:  # the product of step 0: W_hh[:, U_k]^T dz_1
            expected = W[:, j0:j1].T @ ws.pre[:, B : 2 * B]
            got = getattr(variant._bwd._arrays, f"dh{k}")
        np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_split_with_barriers_adds_up():
    metrics = split_metrics(
        lambda: None, 5.0, barrier_call=lambda: None, min_time_s=0.0, min_calls=3
    )["split"]
    total = metrics["gemm_ms"] + metrics["barrier_ms"] + metrics["elementwise_ms"]
    assert total == pytest.approx(5.0)


def test_a_team_of_one_has_no_barrier_loop(cell):
    params, x, grad_y = small_problem(cell)
    one = persistent(cell, "float32", 1).runner(params, x, grad_y)
    two = persistent(cell, "float32", 2).runner(params, x, grad_y)
    assert gemm_and_barrier_call(one, "forward") is None
    assert gemm_and_barrier_call(two, "forward") is not None


def test_barrier_holds_every_thread_until_the_last_arrives():
    threads, rounds = 3, 200
    state, arrivals, seen = spin_barrier.new_state(), np.zeros(rounds, int), []
    lock = threading.Lock()

    def member():
        for r in range(rounds):
            with lock:
                arrivals[r] += 1
            assert spin_barrier.wait(state, threads)
            with lock:
                seen.append(arrivals[r])  # after the barrier every thread has arrived at r

    team = [threading.Thread(target=member) for _ in range(threads)]
    for thread in team:
        thread.start()
    for thread in team:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in team)
    assert seen == [threads] * (threads * rounds)


def test_a_failing_thread_releases_the_others_and_its_error_is_raised():
    team, waited = Team(3), []

    def thread(k, barrier):
        if k == 1:
            raise ValueError("thread 1 failed")
        waited.append(barrier.wait())  # would spin forever without the abort

    with pytest.raises(ValueError, match="thread 1 failed"):
        team.run(thread)
    assert waited == [False, False]


def test_numpy_blas_runs_single_threaded_inside_the_team_only():
    from threadpoolctl import threadpool_info, threadpool_limits

    from rnnopt.models.variants.numpy_blas import numpy_blas

    def numpy_blas_threads():
        (pool,) = [pool for pool in threadpool_info() if pool["filepath"] == numpy_blas()[0]]
        return pool["num_threads"]

    inside = []
    with threadpool_limits(limits=2, user_api="blas"):
        assert numpy_blas_threads() == 2
        Team(2).run(lambda k, barrier: inside.append(numpy_blas_threads()) if k == 0 else None)
        assert numpy_blas_threads() == 2
    assert inside == [1]


def test_forward_output_is_the_reference_at_a_larger_shape():
    # 64 units over 2 threads, 16 steps, batch 8: the BLAS calls' leading dimensions at work
    params, x, grad_y = small_problem("lstm", batch=8, seq_len=16, input_size=24, hidden_size=64)
    variant = persistent("lstm", "float64", 2)
    assert max_rel_error(variant.forward(params, x), reference.forward(params, x)) <= 1e-10
    grads, expected = variant.vjp(params, x, grad_y), reference.vjp(params, x, grad_y)
    for name, value in expected.items():
        assert max_rel_error(grads[name], value) <= TOLERANCE["float64"], name
