"""Verdicts on the guide's claims: each criterion a small test of an Outcome, then one rule.

A criterion returns (True, detail), (False, detail), (INCONCLUSIVE, detail) when its interval
cannot decide, or (None, why) when it has nothing to judge. The verdict: "not measured here:
<why>" when nothing could be judged or a compared variant failed verification; "not judged:
<why>" when the speed was measured in one process a side (no interval); "not supported: <what
failed>" when a judged criterion fails; "inconclusive: <why>" when none fails but one cannot
decide; "supported" when every judged criterion holds. Speed is judged with a practical-
significance threshold (rnnopt.report.intervals.classify): faster only when the whole interval
lies beyond it, and "no meaningful difference" (the claim fails) when the whole interval lies
within it. A row measured at several shapes (small, fastrnns, sweeps) is judged at each shape
alone, and the verdict says where the claim holds: a claim whose outcome depends on the shape
is a finding. Thresholds, the experiments' too, are the constants below: one place.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial

from rnnopt.report import intervals
from rnnopt.report.comparisons import Comparison
from rnnopt.report.intervals import THRESHOLD
from rnnopt.report.outcomes import Outcome

MEMORY_LOWER = 0.95  # candidate peak / baseline peak below this: memory is lower
GC_SHARE_MATTERS = 0.01  # GC pauses above 1% of the baseline's time: GC costs CPU time
SAME_LOSS = 0.05  # |relative change of final loss| within 5%: same effect
THROUGHPUT_GAIN = 1.10  # best batch >= 1.1x the tokens/s of the smallest: batch size matters
# A run learned when its final held-out loss is at most 30% of the predict-the-mean baseline of
# the held-out split (issue 8): well below what any constant prediction reaches.
LEARNED_RATIO = 0.30
# The experiments' criteria (report/experiments/).
LINEAR_R2 = 0.98  # peak vs B this close to a line: the linear memory model holds
SAME_THROUGHPUT = 0.05  # the largest fitting batch within 5% of the best fitting one's tokens/s
MIN_TIMED_EPOCHS = 3  # fewer epochs give no spread: no speed verdict
CACHE_DROP = 0.70  # beyond L3 below 70% of the best GFLOP/s inside the caches: a visible drop
MIN_SWEEP_POINTS = 3  # hidden sizes that make a sweep
OUTPUT_ERROR_MATTERS = 1e-2  # max |h - h_float64| above 1% of tanh's range

INCONCLUSIVE = "inconclusive"  # a criterion whose interval cannot decide
Check = tuple[bool | str | None, str]
ONE_PROCESS = "one process a side: no interval"

# The verdict's category: what `rnnopt compare` and the rerun check compare between runs.
CATEGORIES = (
    "supported",
    "not supported",
    "depends on the shape",
    "inconclusive",
    "not judged",
    "not measured",
)


def verdict_category(text: str) -> str:
    """The category a verdict text starts with (one of CATEGORIES)."""
    for category in sorted(CATEGORIES, key=len, reverse=True):
        if text.startswith(category):
            return category
    raise ValueError(f"not a verdict: {text!r}")


# What the speed criterion says for each reading of its interval (intervals.classify).
SPEED_READINGS: dict[str, bool | str] = {
    intervals.FASTER: True,
    intervals.SLOWER: False,
    intervals.SAME: False,
    intervals.INCONCLUSIVE: INCONCLUSIVE,
}


def speed(o: Outcome, threshold: float = THRESHOLD) -> Check:
    """The speed criterion: the interval the verdict reads (Interval.judged: the host's
    reference runs pooled where this run agrees with them, this run's own otherwise)."""
    s = o.speedup
    if s is None:
        return None, "speed not measured"
    judged = s.judged
    found = intervals.classify(judged, threshold)
    if found is None:
        return None, f"{s}: {ONE_PROCESS}"
    if judged.spell_could_make(found):
        slowed = sum(s.spell_slowed)
        return INCONCLUSIVE, (
            f"{s}: rests on {slowed} process{'es' if slowed > 1 else ''} that a slow spell of "
            f"the host slowed, which could have made it {found}"
        )
    shown = s.shown()
    details = {
        intervals.FASTER: f"faster: {shown}" if s.reads_reference else f"{s} faster",
        intervals.SLOWER: f"slower ({shown})",
        intervals.SAME: f"no meaningful difference ({shown}: within {threshold:.0%})",
        intervals.INCONCLUSIVE: f"{shown}: the interval crosses the {threshold:.0%} threshold",
    }
    return SPEED_READINGS[found], details[found]


def memory(o: Outcome) -> Check:
    if o.memory_ratio is None:
        return None, "memory not measured"
    if o.memory_ratio < MEMORY_LOWER:
        return True, f"peak memory {o.memory_ratio:.2f}x"
    return False, f"peak memory not lower ({o.memory_ratio:.2f}x)"


def allocations(o: Outcome) -> Check:
    if o.allocations is None:
        return None, "allocations not measured"
    candidate, baseline = o.allocations
    if candidate < baseline:
        return True, f"numpy buffers per step {baseline:.1f} -> {candidate:.1f}"
    return False, f"no fewer numpy buffers per step ({baseline:.1f} -> {candidate:.1f})"


def gc(o: Outcome) -> Check:
    if o.gc_share is None:
        return None, "GC pauses not measured"
    candidate, baseline = o.gc_share
    if baseline > GC_SHARE_MATTERS and candidate < baseline:
        return True, f"GC pauses {baseline:.1%} -> {candidate:.1%} of the time"
    return False, f"GC pauses only {baseline:.1%} of the naive variant's time"


def stability(o: Outcome) -> Check:
    return o.stability if o.stability is not None else (None, "clipping not measured")


def same_loss(o: Outcome) -> Check:
    if o.loss_change is None:
        return None, "loss not measured"
    if abs(o.loss_change) <= SAME_LOSS:
        return True, f"final loss {o.loss_change:+.1%}"
    return False, f"final loss changed {o.loss_change:+.1%}"


def throughput(o: Outcome) -> Check:
    """The best batch's tokens/s over the smallest's: at least THROUGHPUT_GAIN over the whole
    interval (the batch-size runs' processes); one process a side (older runs): the ratio."""
    if o.throughput is None:
        return None, "throughput not measured"
    gain = o.throughput
    low, high = (gain.low, gain.high) if gain.has_interval else (gain.median, gain.median)
    if low >= THROUGHPUT_GAIN:
        return True, f"best batch {gain} the smallest's tokens/s"
    if high < THROUGHPUT_GAIN:
        return False, f"throughput flat over batch sizes ({gain})"
    return INCONCLUSIVE, f"best batch {gain} the smallest's tokens/s crosses {THROUGHPUT_GAIN}x"


def learned(o: Outcome) -> Check:
    """Every compared training run learned: held-out loss <= LEARNED_RATIO x its baseline."""
    if not o.heldout_ratios:
        return None, "held-out loss not measured"
    ratios = o.heldout_ratios.items()
    failed = [f"{name} {ratio:.0%}" for name, ratio in ratios if not ratio <= LEARNED_RATIO]
    if failed:
        return False, (
            f"did not learn: {', '.join(failed)} of the predict-the-mean held-out loss "
            f"(learned: <= {LEARNED_RATIO:.0%})"
        )
    shown = ", ".join(f"{name} {ratio:.0%}" for name, ratio in ratios)
    return True, f"all learned (held-out loss {shown} of the predict-the-mean baseline)"


CRITERIA: dict[str, Callable[[Outcome], Check]] = {
    "speed": speed,
    "memory": memory,
    "allocations": allocations,
    "gc": gc,
    "stability": stability,
    "same_loss": same_loss,
    "throughput": throughput,
    "learned": learned,
}


def single_verdict(
    comparison: Comparison,
    outcome: Outcome,
    threshold: float = THRESHOLD,
    speed_reading: str | None = None,
) -> str:
    """The verdict on one outcome (one shape, or a row measured at one shape only); with
    `speed_reading` (a key of SPEED_READINGS), the verdict had the speedup read so."""
    criteria = CRITERIA | {"speed": partial(speed, threshold=threshold)}
    if speed_reading is not None:
        criteria["speed"] = lambda o: (SPEED_READINGS[speed_reading], f"read {speed_reading}")
    checks = [criteria[name](outcome) for name in comparison.criteria]
    judged = [(passed, detail) for passed, detail in checks if passed is not None]
    if not judged:
        one_process = [detail for _, detail in checks if detail.endswith(ONE_PROCESS)]
        if one_process and not outcome.missing:
            return "not judged: " + "; ".join(one_process)
        why = outcome.missing or [detail for _, detail in checks]
        return "not measured here: " + "; ".join(why)
    failed = [detail for passed, detail in judged if passed is False]
    if failed:
        return "not supported: " + "; ".join(failed)
    undecided = [detail for passed, detail in judged if passed == INCONCLUSIVE]
    if undecided:
        return "inconclusive: " + "; ".join(undecided)
    unjudged = [detail for passed, detail in checks if passed is None]
    # A speed that held over the host's reference runs says so: this run's own interval,
    # shown beside the verdict, may cross the threshold.
    pooled = [
        detail
        for name, (passed, detail) in zip(comparison.criteria, checks, strict=True)
        if name == "speed" and passed is True and outcome.speedup.reads_reference
    ]
    notes = pooled + unjudged
    return "supported" + (f" ({'; '.join(notes)})" if notes else "")


def reading_matters(
    comparison: Comparison, outcome: Outcome, readings, threshold: float = THRESHOLD
) -> bool:
    """Whether the speedup read another of `readings` would change the category of the
    verdict on `outcome` (one shape): not for a row that judges no speed, nor where another
    criterion fails whatever the speed."""
    if "speed" not in comparison.criteria:
        return False
    now = verdict_category(single_verdict(comparison, outcome, threshold))
    return any(
        verdict_category(single_verdict(comparison, outcome, threshold, reading)) != now
        for reading in readings
    )


def per_shape(outcome: Outcome, shaped: Outcome) -> Outcome:
    """One shape's measurements with the row's other figures (loss, learning, missing)."""
    return replace(
        outcome,
        speedup=shaped.speedup,
        memory_ratio=shaped.memory_ratio,
        allocations=shaped.allocations,
        gc_share=shaped.gc_share,
        jobs=shaped.jobs,
        by_shape={},
    )


def _detail(text: str) -> str:
    return text.split(": ", 1)[1] if ": " in text else text


def verdict(comparison: Comparison, outcome: Outcome, threshold: float = THRESHOLD) -> str:
    """The row's verdict; a row measured at several shapes is judged per shape, and says where
    the claim holds: "supported at every shape ...", "not supported at any shape ...",
    "depends on the shape: holds at fastrnns (...); not at small (...)" (a finding), or
    "inconclusive: ..." when a shape cannot decide and the others do not disagree."""
    if outcome.unverified:
        return "not measured here: failed verification: " + ", ".join(outcome.unverified)
    if not outcome.by_shape:
        return single_verdict(comparison, outcome, threshold)
    verdicts = {
        shape: single_verdict(comparison, per_shape(outcome, shaped), threshold)
        for shape, shaped in outcome.by_shape.items()
    }
    judged = {s: v for s, v in verdicts.items() if not v.startswith(("not measured", "not judged"))}
    if not judged:
        return single_verdict(comparison, outcome, threshold)
    by_category = {
        category: {s: v for s, v in judged.items() if verdict_category(v) == category}
        for category in ("supported", "not supported", "inconclusive")
    }
    holds, fails, undecided = by_category.values()
    speed = {s: o.speedup.shown() for s, o in outcome.by_shape.items() if o.speedup is not None}
    held = "; ".join(f"{s} ({speed.get(s, _detail(v))})" for s, v in holds.items())
    failed = "; ".join(f"{s} ({_detail(v)})" for s, v in fails.items())
    open_ = "; ".join(f"{s} ({speed.get(s, _detail(v))})" for s, v in undecided.items())
    if holds and fails:
        text = f"depends on the shape: holds at {held}; not at {failed}"
        return text + (f"; inconclusive at {open_}" if undecided else "")
    if undecided:
        decided = f"holds at {held}" if holds else (f"not at {failed}" if fails else "")
        return f"inconclusive at {open_}" + (f"; {decided}" if decided else "")
    if not fails:
        shown = "; ".join(f"{s} {speed.get(s, _detail(v))}" for s, v in holds.items())
        return f"supported at every shape measured ({shown})"
    shown = "; ".join(f"{s}: {_detail(v)}" for s, v in fails.items())
    return f"not supported at any shape ({shown})"
