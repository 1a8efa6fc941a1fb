"""Automatic batch size: the batch with the highest measured tokens/s whose measured peak
memory fits a budget (guide 4.5, "smarter batching"). A search over measured points, never a
formula alone.

Search (every probe is one call of the injected `measure(batch) -> Point`):
1. Doubling from B=1 up to `max_batch` until a batch does not fit (its peak exceeds the
   budget, or it ran out of memory): that brackets the largest fitting batch in [lo, hi).
2. Inside the bracket, the linear memory model (peak ~ intercept + slope * B, least squares
   over every point measured so far) proposes the next probe: its predicted largest fitting
   batch, or the batch next to the bracket's end it doubts. A recurrent layer's activations
   grow linearly in B, so the model usually closes the bracket in two probes (its prediction
   fits, the next batch does not). When a probe contradicts the model, or after
   MODEL_PROBES_PER_MIDPOINT model probes, the next probe is the midpoint: at most
   3 * log2(hi - lo) probes however wrong the model is.
3. The pick: the fitting point with the highest tokens/s (ties: the smaller batch). The
   search never claims a batch it did not measure.
4. Confirmation (`confirm`): one timing of a point is a fraction of a second, and a slow spell
   of the host within it decides the pick: of 26 runs of one host, two picked B=64 over the
   largest fitting B=108 at 1.10-1.15x, where B=64 had measured about 0.91x of B=108 in the
   rest (run AM: B=108 251,617 tokens/s, B=109 next to it 318,343). So the largest fitting
   batch and the fastest other fitting point are timed again in rounds, one timing of each a
   round, the order alternating, each round after the run's spell gate and each timing between
   two speed probes; a round whose probes read a slow spell does not count, and up to as many
   rounds again replace such rounds. The pick is the one with the higher geometric mean over
   the kept rounds. The timings are kept (series confirm_batch, confirm_tokens_per_s,
   confirm_probe_ms, confirm_kept): the report's verdict reads the interval of their ratio,
   paired by round.

The memory model is reported with every point tried, so the choice can be checked.
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import NamedTuple

from rnnopt.errors import UserError
from rnnopt.measure.contention import speed_probe_ms
from rnnopt.measure.harness import VariantFailed, guard_calls, guarded, make_inputs, phase_call
from rnnopt.measure.heap import step_peak
from rnnopt.measure.profile import spell_gate, timing_budget
from rnnopt.measure.spells import normal_probes
from rnnopt.measure.timing import benchmark
from rnnopt.models.flops import Shape
from rnnopt.models.variants import get_variant
from rnnopt.records import fast_ms, status_of

# At most this many model-guided probes between two midpoints: the bracket at least halves
# every MODEL_PROBES_PER_MIDPOINT + 1 probes, however wrong the model.
MODEL_PROBES_PER_MIDPOINT = 2


@dataclass(frozen=True)
class Point:
    """One measured batch size. peak_mib None: it could not run (oom): it does not fit."""

    batch: int
    tokens_per_s: float | None
    peak_mib: float | None
    status: str = "ok"

    def fits(self, budget_mib: float) -> bool:
        return self.status == "ok" and self.peak_mib is not None and self.peak_mib <= budget_mib


class Timing(NamedTuple):
    """One confirmation timing: the batch, its tokens/s, the slower of the speed probes just
    before and just after it (rnnopt.measure.contention.speed_probe_ms), and the run's
    reference probe it is judged against (rnnopt.measure.spells; None: none yet, the job's
    own fastest probe then)."""

    batch: int
    tokens_per_s: float
    probe_ms: float
    reference_ms: float | None = None


@dataclass
class Search:
    """Every point in the order tried, the bracket, the fit and the pick (None: none fits)."""

    budget_mib: float
    max_batch: int
    points: list[Point] = field(default_factory=list)
    max_fitting_batch: int | None = None
    first_too_large: int | None = None  # the smallest measured batch that does not fit
    fit: dict | None = None
    pick: Point | None = None
    message: str | None = None  # why there is no pick
    # The confirmation timings (confirm), two a round, in the order timed.
    rounds: list[Timing] = field(default_factory=list)

    @property
    def budget_binding(self) -> bool:
        """True when some batch up to max_batch did not fit: the budget set the limit."""
        return self.first_too_large is not None


class NothingFits(UserError):
    """Even B=1 exceeds the budget; `search` holds the point tried."""

    def __init__(self, message: str, tried: Search):
        super().__init__(message)
        self.search = tried


def linear_fit(points: list[Point]) -> dict | None:
    """Least-squares peak_mib ~ intercept_mib + slope_mib_per_batch * batch over the points
    that ran; with r2 (1 - residual / total sum of squares, 1.0 when the peaks are all equal)
    and n. None with fewer than two distinct batches."""
    ran = [(p.batch, p.peak_mib) for p in points if p.status == "ok" and p.peak_mib is not None]
    if len({b for b, _ in ran}) < 2:
        return None
    n = len(ran)
    mean_b = sum(b for b, _ in ran) / n
    mean_m = sum(m for _, m in ran) / n
    s_bb = sum((b - mean_b) ** 2 for b, _ in ran)
    s_bm = sum((b - mean_b) * (m - mean_m) for b, m in ran)
    slope = s_bm / s_bb
    intercept = mean_m - slope * mean_b
    total = sum((m - mean_m) ** 2 for _, m in ran)
    residual = sum((m - intercept - slope * b) ** 2 for b, m in ran)
    r2 = 1.0 - residual / total if total > 0 else 1.0
    return {"intercept_mib": intercept, "slope_mib_per_batch": slope, "r2": r2, "n": n}


def predicted_max_batch(fit: dict | None, budget_mib: float) -> int | None:
    """The largest batch the linear model puts under the budget; None without a rising model."""
    if fit is None or not fit["slope_mib_per_batch"] > 0:
        return None
    return math.floor((budget_mib - fit["intercept_mib"]) / fit["slope_mib_per_batch"])


def search(measure: Callable[[int], Point], budget_mib: float, max_batch: int) -> Search:
    """The search above. `measure(batch)` returns that batch's Point (status "oom" and
    peak_mib None when it could not run). Raises NothingFits, with the one-line message, when
    B=1 does not fit; `Search.message` holds the same line for the record."""
    if not budget_mib > 0 or max_batch < 1:
        raise UserError(f"budget_mib must be > 0 and max_batch >= 1; got {budget_mib}, {max_batch}")
    result = Search(budget_mib, max_batch)

    def probe(batch: int) -> bool:
        point = measure(batch)
        result.points.append(point)
        return point.fits(budget_mib)

    if not probe(1):
        first = result.points[0]
        peak = "out of memory" if first.peak_mib is None else f"peaks at {first.peak_mib:.2f} MiB"
        result.message = (
            f"budget_mib={budget_mib:g} is too small: batch 1 already {peak}; no batch size fits"
        )
        result.first_too_large = 1
        raise NothingFits(result.message, result)
    lo, hi, batch = 1, None, 1
    while batch < max_batch:
        batch = min(2 * batch, max_batch)
        if probe(batch):
            lo = batch
        else:
            hi = batch
            break
    model_probes = 0  # model probes since the last midpoint
    model_agreed = True
    while hi is not None and hi - lo > 1:
        candidate, claim = (lo + hi) // 2, None
        guess = predicted_max_batch(linear_fit(result.points), budget_mib)
        if guess is not None and model_agreed and model_probes < MODEL_PROBES_PER_MIDPOINT:
            # the model claims `guess` fits and guess + 1 does not: test the side in doubt
            candidate = min(max(guess, lo + 1), hi - 1)
            claim = candidate <= guess
        model_probes = model_probes + 1 if claim is not None else 0
        fits = probe(candidate)
        model_agreed = claim is None or claim == fits
        if fits:
            lo = candidate
        else:
            hi = candidate
    result.max_fitting_batch, result.first_too_large = lo, hi
    result.fit = linear_fit(result.points)
    fitting = [p for p in result.points if p.fits(budget_mib) and p.tokens_per_s is not None]
    result.pick = max(fitting, key=lambda p: (p.tokens_per_s, -p.batch), default=None)
    if result.pick is None:
        result.message = "no fitting batch has a throughput"
    return result


def clean_rounds(timings: list[Timing]) -> list[bool]:
    """Per round (two timings, in order) whether both of its timings ran at the host's normal
    speed (rnnopt.measure.spells.normal_probes): a round in a slow spell measures the spell."""
    references = {t.reference_ms for t in timings if t.reference_ms}
    reference = min(references) if references else None
    normal = normal_probes([t.probe_ms for t in timings], reference)
    return [normal[k] and normal[k + 1] for k in range(0, len(timings) - 1, 2)]


def confirm(
    result: Search, time_round: Callable[[tuple[int, int]], list[Timing]], rounds: int
) -> Search:
    """Time the largest fitting batch and the fastest other fitting point of `result` again in
    `rounds` rounds (time_round: one timing of each, in the order given), their order
    alternating from round to round; while fewer than `rounds` rounds are clean
    (clean_rounds), up to `rounds` more. The pick is the one whose kept timings have the
    higher geometric mean tokens/s (ties: the smaller batch), and its tokens_per_s becomes
    that mean. Nothing to confirm without a pick or another fitting point."""
    largest = result.max_fitting_batch
    fitting = {p.batch: p for p in result.points if p.fits(result.budget_mib) and p.tokens_per_s}
    others = [p for batch, p in fitting.items() if batch != largest]
    if result.pick is None or largest not in fitting or not others or rounds < 1:
        return result
    other = max(others, key=lambda p: (p.tokens_per_s, -p.batch)).batch
    done = 0
    while done < rounds or (sum(clean_rounds(result.rounds)) < rounds and done < 2 * rounds):
        result.rounds += time_round((other, largest) if done % 2 == 0 else (largest, other))
        done += 1
    used = [t for t, keep in zip(result.rounds, kept(result.rounds), strict=True) if keep]
    means = {
        batch: statistics.geometric_mean(t.tokens_per_s for t in used if t.batch == batch)
        for batch in (other, largest)
    }
    best = max(means, key=lambda batch: (means[batch], -batch))
    result.pick = Point(best, means[best], fitting[best].peak_mib)
    return result


def kept(timings: list[Timing]) -> list[bool]:
    """Per timing whether the pick rests on it: those of the clean rounds, or all of them
    where the clean rounds are not at least half of them, and two (a record the report then
    says rests on rounds in a spell). A spell is a departure from the host's usual speed; in
    a job that spent most of its rounds in one, the few clean rounds are no better a sample
    (a run here kept 2 of 10: a paired interval on one degree of freedom, 0.83-1.06x, where
    all ten read 0.91x, 0.84-1.00), and a round's two timings share its spell."""
    clean = clean_rounds(timings)
    if sum(clean) < max(2, len(clean) / 2):
        return [True] * len(timings)
    return [clean[k // 2] for k in range(len(timings))]


def summary(result: Search) -> dict:
    """The record's metrics of a search: budget, pick, bracket, fit and the model's own pick."""
    pick = result.pick
    fit = result.fit
    predicted = predicted_max_batch(fit, result.budget_mib)
    smallest = next((p for p in result.points if p.batch == 1 and p.tokens_per_s), None)
    return {
        "budget_mib": result.budget_mib,
        "max_batch": result.max_batch,
        "points_tried": len(result.points),
        "budget_binding": result.budget_binding,
        "max_fitting_batch": result.max_fitting_batch,
        "first_too_large_batch": result.first_too_large,
        "pick_batch": pick.batch if pick else None,
        "pick_tokens_per_s": pick.tokens_per_s if pick else None,
        "pick_peak_mib": pick.peak_mib if pick else None,
        "pick_over_batch1_tokens_per_s": (
            pick.tokens_per_s / smallest.tokens_per_s if pick and smallest else None
        ),
        "fit": {**fit, "predicted_max_batch": predicted} if fit else {},
        "confirm_rounds": len(result.rounds) // 2,
        "confirm_clean_rounds": sum(clean_rounds(result.rounds)),
        "confirm_probe_reference_ms": next(
            (t.reference_ms for t in result.rounds if t.reference_ms), None
        ),
    }


def series(result: Search) -> dict[str, list]:
    """Every point in the order tried, as parallel lists (the record's series), and the
    confirmation timings in the order timed (confirm_batch, confirm_tokens_per_s,
    confirm_probe_ms, and confirm_kept: whether the pick rests on it: kept)."""
    rows = [asdict(p) | {"fits": p.fits(result.budget_mib)} for p in result.points]
    points = {
        key: [row[key] for row in rows] for key in ("batch", "tokens_per_s", "peak_mib", "fits")
    }
    if not result.rounds:
        return points
    return points | {
        "confirm_batch": [t.batch for t in result.rounds],
        "confirm_tokens_per_s": [t.tokens_per_s for t in result.rounds],
        "confirm_probe_ms": [t.probe_ms for t in result.rounds],
        "confirm_kept": kept(result.rounds),
    }


class Measurer:
    """measure(batch) -> Point: tokens/s by the timing protocol, then the heap peak."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.variant = guarded(get_variant, args.variant, dtype=args.dtype, device=args.device)
        self.instruments: set[str] = set()
        self.gate = spell_gate(args)  # None without --spell-log
        self.waited_s, self.fastest_probe_ms = 0.0, math.inf

    def shape(self, batch: int) -> Shape:
        return Shape(batch, self.args.seq_len, self.args.input_size, self.args.hidden_size)

    def __call__(self, batch: int) -> Point:
        args, shape = self.args, self.shape(batch)
        try:
            tokens_per_s = self._tokens_per_s(shape)
            heap = guarded(step_peak, args.variant, args.dtype, args.device, shape, args.phase,
                           args.seed)  # fmt: skip
        except VariantFailed as failure:
            if status_of(failure.error) != "oom":
                raise
            return Point(batch, None, None, status="oom")
        self.instruments.add(heap["instrument"])
        print(f"  B={batch}: {tokens_per_s:.0f} tokens/s, peak {heap['peak_mib']:.2f} MiB")
        return Point(batch, tokens_per_s, heap["peak_mib"])

    def time_round(self, batches: tuple[int, int]) -> list[Timing]:
        """One confirmation round: a wait for a slow spell to pass (with --spell-log), then one
        timing of each batch in order, a speed probe before and after each (no heap peak)."""
        if self.gate is not None:
            probe, waited, reference = self.gate.wait()
        else:
            probe, waited, reference = speed_probe_ms(), 0.0, None
        self.waited_s += waited
        timings = []
        for batch in batches:
            rate = self._tokens_per_s(self.shape(batch))
            after = speed_probe_ms()
            self.fastest_probe_ms = min(self.fastest_probe_ms, probe, after)
            timings.append(Timing(batch, rate, max(probe, after), reference))
            print(f"  confirm B={batch}: {rate:.0f} tokens/s, probes {probe:.2f} {after:.2f} ms")
            probe = after
        return timings

    def log_spells(self) -> None:
        """This job's line in the run's spell log (with --spell-log, after its rounds): its
        fastest probe and the seconds it waited, as a profile process logs them."""
        if self.gate is not None and math.isfinite(self.fastest_probe_ms):
            self.gate.record(self.fastest_probe_ms, self.waited_s)

    def _tokens_per_s(self, shape: Shape) -> float:
        args = self.args
        try:
            params, x, grad_y = make_inputs(self.variant.cell, shape, args.seed)
        except MemoryError as error:
            raise VariantFailed(error) from error
        runner = guarded(self.variant.runner, params, x, grad_y, 1e-3)
        call, before = guard_calls(*phase_call(runner, args.phase))
        metrics = benchmark(
            call,
            sync=guard_calls(runner.sync)[0],
            untimed_setup=before,
            device=runner.device,
            compiles=self.variant.compiles,
            keep_samples=True,
            **timing_budget(args),
        )
        # the fast calls (records.fast_ms), as the speedups' process times: a slow spell that
        # covers part of a timing of a fraction of a second moves its median, and the pick
        return shape.tokens / (fast_ms(metrics["samples_ms"]) / 1e3)
