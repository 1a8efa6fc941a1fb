"""Speedup intervals over processes (rnnopt.report.intervals) and the threshold rule."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from rnnopt.report.intervals import (
    FASTER,
    INCONCLUSIVE,
    SAME,
    SLOWER,
    Interval,
    between_run_sd,
    change_interval,
    classify,
    geometric_mean,
    paired_ratio_interval,
    processes_to_decide,
    ratio_interval,
    run_spread_keeps_open,
    with_run_spread,
)


def process_medians(rng, true_ms: float, processes: int, between: float, calls: int = 50):
    """Medians of `processes` simulated processes: each process runs at its own speed (the
    host's state, its memory layout: lognormal, sd `between`) and its calls scatter around
    that with a right tail (what one process's timer sees)."""
    speeds = true_ms * np.exp(rng.normal(0, between, processes))
    return [float(np.median(s * (1 + rng.exponential(0.05, calls)))) for s in speeds]


def coverage(rng, simulations: int, processes: int, confidence: float = 0.95) -> float:
    """Share of simulated runs whose interval holds the true speedup (baseline 13 ms,
    candidate 10 ms: 1.3x)."""
    covered = 0
    for _ in range(simulations):
        between = rng.uniform(0.01, 0.15)  # quiet to busy hosts
        baseline = process_medians(rng, 13.0, processes, between)
        candidate = process_medians(rng, 10.0, processes, between)
        interval = ratio_interval(baseline, candidate, confidence)
        covered += interval.low <= 1.3 <= interval.high
    return covered / simulations


def test_the_interval_covers_the_true_speedup_at_its_confidence():
    """400 simulated runs of 3 processes a side whose speed drifts between processes: a 95%
    interval holds the true ratio in about 95% of them (binomial sd 1.1%)."""
    rng = np.random.default_rng(24)
    assert 0.92 <= coverage(rng, 400, processes=3) <= 0.98
    assert 0.92 <= coverage(rng, 400, processes=5) <= 0.98


def test_the_confidence_level_is_honoured():
    rng = np.random.default_rng(7)
    assert 0.42 <= coverage(rng, 400, processes=3, confidence=0.50) <= 0.58


def test_estimate_is_the_ratio_of_geometric_means():
    interval = ratio_interval([2.0, 8.0], [1.0, 4.0])
    assert interval.median == pytest.approx(geometric_mean([2, 8]) / geometric_mean([1, 4]))
    assert interval.median == pytest.approx(2.0)
    assert interval.processes == (2, 2) and interval.n == 2
    # by hand: each side's logs differ by ln 4, so each variance of the mean is ln(4)^2 / 4;
    # equal variances and two values a side: Welch's df is 2, t(0.975, 2) = 4.303
    half = 4.3027 * math.sqrt(2 * math.log(4) ** 2 / 4)
    assert interval.low == pytest.approx(2.0 * math.exp(-half), rel=1e-4)
    assert interval.high == pytest.approx(2.0 * math.exp(half), rel=1e-4)


def test_pairs_cancel_a_drift_that_unpaired_sides_carry():
    """Pairs timed side by side while the host slows from round to round: the ratio inside
    each pair is steady, so the paired interval is narrow where Welch's over the two sides is
    wide; and its coverage of the true ratio holds at its confidence."""
    drift = [1.0, 0.9, 0.8, 0.7, 0.6]
    other, largest = [0.91 * d for d in drift], list(drift)
    paired = paired_ratio_interval(other, largest)
    assert paired.median == pytest.approx(0.91)
    assert paired.high - paired.low == pytest.approx(0.0, abs=1e-12)
    assert paired.df == 4 and paired.processes == (5, 5)
    unpaired = ratio_interval(other, largest)
    assert unpaired.low < 0.8 and unpaired.high > 1.0
    rng = np.random.default_rng(5)
    covered = 0
    for _ in range(400):
        host = np.exp(rng.normal(0, 0.2, 5))  # shared by both timings of a round
        a = 0.91 * host * np.exp(rng.normal(0, 0.03, 5))
        b = host * np.exp(rng.normal(0, 0.03, 5))
        interval = paired_ratio_interval(a, b)
        covered += interval.low <= 0.91 <= interval.high
    assert 0.92 <= covered / 400 <= 0.98
    # by hand: logs of the ratios ln 2 and ln 8, mean ln 4, sd ln(2) sqrt(2), se ln 2,
    # t(0.975, 1) = 12.706
    two = paired_ratio_interval([2.0, 8.0], [1.0, 1.0])
    half = 12.706 * math.log(2)
    assert two.median == pytest.approx(4.0)
    assert two.high == pytest.approx(4.0 * math.exp(half), rel=1e-3)
    assert not paired_ratio_interval([2.0], [1.0]).has_interval
    assert paired_ratio_interval([0.0], [1.0]) is None


def test_one_process_a_side_has_no_interval():
    interval = ratio_interval([2.0], [1.0, 1.1, 0.9])
    assert not interval.has_interval and interval.n == 1
    assert str(interval) == f"{interval.median:.2f}x"
    assert classify(interval) is None
    assert ratio_interval([], [1.0]) is None
    assert ratio_interval([0.0, -1.0], [1.0]) is None  # no positive time


def test_identical_processes_give_a_point_interval():
    interval = ratio_interval([2.0, 2.0, 2.0], [1.0, 1.0, 1.0])
    assert (interval.low, interval.median, interval.high) == (2.0, 2.0, 2.0)


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (1.051, 1.3, FASTER),
        (1.049, 1.3, INCONCLUSIVE),  # touches the threshold band
        (0.97, 1.04, SAME),
        (1 / 1.05, 1.05, SAME),  # the band's edges belong to it
        (0.94, 1.02, INCONCLUSIVE),
        (0.5, 0.95, SLOWER),
        (0.5, 0.953, INCONCLUSIVE),  # 1 / 1.05 = 0.952
        (0.9, 1.2, INCONCLUSIVE),  # wider than the band on both sides
    ],
)
def test_the_threshold_rule(low, high, expected):
    assert classify(Interval(math.sqrt(low * high), low, high, (3, 3))) == expected


def test_a_larger_threshold_turns_small_effects_into_no_difference():
    interval = Interval(1.08, 1.06, 1.10, (3, 3))
    assert classify(interval, 0.05) == FASTER
    assert classify(interval, 0.10) == SAME
    assert classify(interval, 0.08) == INCONCLUSIVE


def spread_sides(processes: int, speedup: float, spread: float) -> tuple[list, list]:
    """Baseline and candidate process times whose logs have the same standard deviation,
    `spread`, at every number of processes: the spread that processes_to_decide assumes."""
    z = np.arange(processes) - (processes - 1) / 2
    z = z / z.std(ddof=1)
    return list(10.0 * np.exp(spread * z)), list(10.0 / speedup * np.exp(spread * z))


@pytest.mark.parametrize("speedup", [1.09, 1.02, 0.93])  # faster, no difference, slower
def test_the_projected_processes_decide_when_the_spread_stays(speedup):
    found = ratio_interval(*spread_sides(3, speedup, 0.03))
    assert classify(found) == INCONCLUSIVE
    need = processes_to_decide(found, most=60)
    assert 3 < need <= 60
    assert classify(ratio_interval(*spread_sides(need, speedup, 0.03))) != INCONCLUSIVE
    assert classify(ratio_interval(*spread_sides(need - 1, speedup, 0.03))) == INCONCLUSIVE


def test_no_number_of_processes_decides_an_estimate_on_the_threshold():
    assert processes_to_decide(Interval(1.05, 1.03, 1.07, (3, 3))) is None
    assert processes_to_decide(Interval(1 / 1.05, 0.93, 0.97, (3, 3))) is None
    # near it, the cap is reached first
    assert processes_to_decide(Interval(1.055, 1.0, 1.11, (3, 3)), most=20) is None
    assert processes_to_decide(Interval(1.055, 1.0, 1.11, (3, 3)), most=2000) > 20
    assert processes_to_decide(Interval(1.2)) is None  # one process: no spread to project


def test_a_decided_interval_needs_the_processes_it_has():
    assert processes_to_decide(Interval(1.2, 1.1, 1.3, (4, 5))) == 4


def test_a_rerun_lands_inside_the_first_runs_interval_less_often_than_its_confidence():
    """The rerun check (B's estimate inside A's 95% interval) with no difference at all between
    runs: B's estimate has its own error, so it lands inside about 91% of the time with three
    processes a side (the t quantile at few degrees of freedom is wide) and less with more
    processes, towards 83% (P(|Z| < 1.96 / sqrt 2)). docs/compare.md cites these figures."""
    rng = np.random.default_rng(11)

    def inside(processes: int, runs: int = 3000) -> float:
        def one_run():
            sides = rng.normal(0, 0.02, (2, processes))
            return ratio_interval(list(np.exp(sides[0])), list(np.exp(sides[1])))

        hits = 0
        for _ in range(runs):
            a, b = one_run(), one_run()
            hits += a.low <= b.median <= a.high
        return hits / runs

    three, twenty = inside(3), inside(20)
    assert 0.88 < three < 0.94
    assert 0.80 < twenty < 0.87


def test_the_change_between_two_runs_covers_no_change_at_its_confidence():
    """The rerun test that allows for B's own error: two runs of one speedup (three processes
    a side each, no difference between the runs), change_interval(A, B) holds 1.0 in about
    95% of pairs, where 'B inside A's interval' holds in about 91% (the test above)."""
    rng = np.random.default_rng(12)

    def one_run():
        sides = rng.normal(0, 0.02, (2, 3))
        return ratio_interval(list(13.0 * np.exp(sides[0])), list(10.0 * np.exp(sides[1])))

    held = sum(
        (found := change_interval(one_run(), one_run())).low <= 1.0 <= found.high
        for _ in range(4000)
    )
    assert 0.935 < held / 4000 < 0.965


def test_a_change_needs_two_welch_intervals():
    a = ratio_interval([13.0, 13.2, 12.9], [10.0, 10.1, 9.9])
    b = ratio_interval([13.0, 13.1, 12.8], [9.0, 9.1, 8.9])  # the speedup grew 1.11x
    found = change_interval(a, b)
    assert found.median == pytest.approx(b.median / a.median)
    assert classify(found) == FASTER  # larger in B
    assert found.se == pytest.approx(math.sqrt(a.se**2 + b.se**2))
    assert change_interval(Interval(1.2, 1.1, 1.3, (3, 3)), b) is None  # a union: no se


def shifted_run(rng, processes: int, within: float, shift: float) -> Interval:
    """One run of a 1.3x speedup (13 ms / 10 ms) whose baseline side shifts as a whole by a
    lognormal factor of sd `shift` (a run-level state that every process of the run shares),
    processes scattering around it with sd `within`."""
    run_level = rng.normal(0, shift)
    baseline = 13.0 * np.exp(run_level + rng.normal(0, within, processes))
    candidate = 10.0 * np.exp(rng.normal(0, within, processes))
    return ratio_interval(list(baseline), list(candidate))


def covered(rng, within: float, shift: float, earlier: int = 7, runs: int = 1500):
    """Share of runs whose interval holds 1.3: over its processes alone, and widened by the
    between-run spread estimated from `earlier` runs before it."""
    plain = widened = 0
    for _ in range(runs):
        before = [shifted_run(rng, 3, within, shift) for _ in range(earlier)]
        run_sd = between_run_sd([math.log(b.median) for b in before], [b.se for b in before])
        now = shifted_run(rng, 3, within, shift)
        wide = with_run_spread(now, run_sd, earlier - 1)
        plain += now.low <= 1.3 <= now.high
        widened += wide.low <= 1.3 <= wide.high
    return plain / runs, widened / runs


def test_a_run_level_shift_escapes_the_process_interval_and_the_spread_brings_it_back():
    """A shift shared by a run's processes (sd 2%, twice their own spread) is invisible to an
    interval over them: it holds the true speedup in about 69% of runs. Widened by the spread
    measured over seven earlier runs, about 95%. (Binomial sd at 1500 runs: 0.6%.)"""
    plain, widened = covered(np.random.default_rng(3), within=0.01, shift=0.02)
    assert plain < 0.75
    assert 0.93 <= widened <= 0.965


def test_without_a_run_level_shift_the_spread_costs_little_coverage():
    """No shift: the estimated spread is often 0 (truncated) and the widened interval stays
    near its confidence, a little above (about 97%)."""
    plain, widened = covered(np.random.default_rng(4), within=0.02, shift=0.0)
    assert 0.93 <= plain <= 0.97
    assert plain <= widened <= 0.99


def test_the_between_run_sd_is_the_excess_of_the_runs_variance():
    log_ratios, se = [0.0, 0.04, 0.02], [0.01, 0.01, 0.01]
    assert between_run_sd(log_ratios, se) == pytest.approx(math.sqrt(0.02**2 - 0.01**2))
    assert between_run_sd([0.0, 0.001, 0.002], se) == 0.0  # runs agree better than processes


def test_the_spread_adds_its_variance_and_never_narrows():
    now = ratio_interval([13.0, 13.2, 12.9], [10.0, 10.1, 9.9])
    assert with_run_spread(now, 0.0, 6) == now
    wide = with_run_spread(now, 0.02, 6)
    assert wide.se == pytest.approx(math.sqrt(now.se**2 + 0.02**2))
    assert (wide.run_sd, wide.run_df, wide.median) == (0.02, 6, now.median)
    assert wide.low < now.low and wide.high > now.high
    # Two processes a side (df about 2) and a tiny spread measured over many runs: Welch-
    # Satterthwaite's df grows more than the variance, yet the interval does not narrow.
    few = ratio_interval([13.0, 13.4], [10.0, 10.1])
    tiny = with_run_spread(few, 0.001, 100)
    assert tiny.low <= few.low and tiny.high >= few.high
    # Run T: two processes a side, one side's equal (df 1), and a spread larger than the
    # processes' own error: exactly the processes' own interval, on a df that says so.
    collapsed = ratio_interval([2.723, 2.877], [0.957, 0.957])
    assert collapsed.df == pytest.approx(1.0)
    held = with_run_spread(collapsed, 0.0877, 10)
    assert (held.low, held.high) == (pytest.approx(collapsed.low), pytest.approx(collapsed.high))
    assert held.se == pytest.approx(math.sqrt(collapsed.se**2 + 0.0877**2))
    assert 1.0 < held.df < 10 and held.run_sd == 0.0877


def test_no_number_of_processes_decides_what_the_run_level_spread_keeps_open():
    """1.07x with a between-run spread of 2% (measured over 7 runs): even infinitely many
    processes leave a half-width of t(6) x 2% = 4.9%, beyond the 1.9% to the 5% bound. The
    same interval over processes alone is decided by more of them."""
    now = ratio_interval([10.7 * f for f in (1.0, 1.01, 0.99)], [10.0, 10.1, 9.9])
    assert processes_to_decide(now) == 4
    assert processes_to_decide(with_run_spread(now, 0.02, 6)) is None
    assert run_spread_keeps_open(with_run_spread(now, 0.02, 6))
    assert not run_spread_keeps_open(now) and not run_spread_keeps_open(
        with_run_spread(now, 0.005, 6)
    )


def test_the_run_level_spread_keeps_open_only_what_the_processes_cannot_move():
    """Run AQ's TorchScript (10th percentiles of its processes, ms): one jit process of three
    11% slower than the other two puts the estimate at 1.10x, 4.6% from the 5% bound, inside
    the t(13) x 2.42% = 5.2% that the host's spread alone leaves. The processes' own interval
    (0.96-1.25x) reaches well past that, so more processes could still decide it: not kept
    open. The same estimate from processes that agree (1.10x (1.09-1.11)) is."""
    slow = with_run_spread(ratio_interval([2.75, 2.86, 2.74], [2.72, 2.48, 2.43]), 0.0242, 13)
    assert abs(math.log(slow.median / 1.05)) < stats.t.ppf(0.975, 13) * 0.0242
    assert not run_spread_keeps_open(slow)
    tight = ratio_interval([2.75, 2.752, 2.751], [2.50, 2.501, 2.502])
    assert tight.median == pytest.approx(slow.median, abs=0.01)
    assert run_spread_keeps_open(with_run_spread(tight, 0.0242, 13))
    # below the bound alike: 1/1.10x, the band about 1/1.05
    mirrored = with_run_spread(
        ratio_interval([2.50, 2.501, 2.502], [2.75, 2.752, 2.751]), 0.0242, 13
    )
    assert run_spread_keeps_open(mirrored)


def test_a_union_of_widened_intervals_is_still_projected():
    """Several pairs at one shape show the union of their intervals, which has no se: the
    projection of processes then leaves the between-run part out instead of failing."""
    union = Interval(1.07, 1.03, 1.11, (3, 3), run_sd=0.02)
    assert processes_to_decide(union) == processes_to_decide(Interval(1.07, 1.03, 1.11, (3, 3)))


def test_a_noisy_run_does_not_hide_the_quiet_runs_disagreement():
    """Three quiet runs (se 0.5%) disagree by 2%; a fourth, spell-widened (se 20%), agrees
    with them. Unweighted, its se^2 outweighs their variance and the spread reads 0; weighted
    by 1 / se^2 (DerSimonian and Laird), the quiet runs carry it."""
    log_ratios, se = [0.0, 0.04, 0.02, 0.02], [0.005, 0.005, 0.005, 0.2]
    unweighted = math.sqrt(max(0.0, np.var(log_ratios, ddof=1) - np.mean(np.square(se))))
    assert unweighted == 0.0
    assert between_run_sd(log_ratios, se) > 0.015


def test_a_run_agrees_with_its_reference_runs_within_their_prediction_interval():
    """with_reference: the pooled interval exp(mean +- t(K-1) se_mean), and agreement when
    this run's log speedup lies within t(df) sqrt(se^2 + se_mean^2) of the pooled mean (df by
    Welch-Satterthwaite); the verdict reads the pooled interval only then."""
    from rnnopt.report.intervals import log_interval, with_reference

    run = log_interval(1.10, 0.01, 10.0, (3, 3), 0.95)
    se_mean, runs = 0.005, 20
    a, b = 0.01**2, se_mean**2
    df = (a + b) ** 2 / (a**2 / 10 + b**2 / (runs - 1))
    reach = stats.t.ppf(0.975, df) * math.sqrt(a + b)
    for factor, agrees in ((0.999, True), (1.001, False)):
        mean = math.log(1.10) - factor * reach
        found = with_reference(run, mean, se_mean, runs)
        assert found.agrees is agrees and found.reference_runs == runs
        half = stats.t.ppf(0.975, runs - 1) * se_mean
        assert found.reference.low == pytest.approx(math.exp(mean - half))
        assert found.reference.high == pytest.approx(math.exp(mean + half))
        assert (found.judged is found.reference) is agrees
        assert found.median == run.median and found.low == run.low  # this run's, unchanged
    # no interval of its own (one process a side): nothing to check it by, so its own
    lone = with_reference(Interval(1.10), math.log(1.10), se_mean, runs)
    assert lone.agrees is None and lone.judged is lone
    # fewer than two reference runs or no pooled figures (an older file): unchanged
    assert with_reference(run, math.log(1.1), se_mean, 1) == run
    assert with_reference(run, math.nan, math.nan, runs) == run


def test_the_pooled_speedup_weights_each_run_by_its_error_and_the_spread():
    from rnnopt.report.intervals import pooled_runs

    logs, ses, tau = [0.05, 0.10, 0.07], [0.01, 0.03, 0.02], 0.01
    weights = [1 / (se**2 + tau**2) for se in ses]
    mean, se = pooled_runs(logs, ses, tau)
    weighted = sum(w * y for w, y in zip(weights, logs, strict=True))
    assert mean == pytest.approx(weighted / sum(weights))
    assert se == pytest.approx(1 / math.sqrt(sum(weights)))
    # without a spread, equal errors: the plain mean and se / sqrt(K)
    assert pooled_runs(logs, [0.02] * 3, 0.0) == (
        pytest.approx(sum(logs) / 3),
        pytest.approx(0.02 / math.sqrt(3)),
    )


def test_a_verdict_prints_its_interval_with_digits_enough_to_tell_it_from_the_bound():
    below = Interval(0.6836, 0.6680, 0.6996, (3, 3))
    assert below.digits_apart(0.7) == 4  # 0.70 and 0.700 would print as the bound
    assert below.text(below.digits_apart(0.7)) == "0.6836x (0.6680-0.6996)"
    assert Interval(0.66, 0.63, 0.69, (3, 3)).digits_apart(0.7) == 2
    assert Interval(0.66, 0.63, 0.69, (3, 3)).digits_apart(0.7, fewest=3) == 3
    assert Interval(0.7, 0.7, 0.7, (3, 3)).digits_apart(0.7) == 6  # on the bound itself
