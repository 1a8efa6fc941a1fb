"""The figures of docs/intervals.md, "Undecided verdicts get more processes": how often two runs
agree on a verdict, without and with the top-up, on synthetic process times.

Each run: 3 processes a side whose log times scatter by SD between processes; a process is
slowed by 5-30% with probability SPELL (a slow spell). With the top-up, one more process a
side while the verdict is inconclusive, up to 20. The interval and the rule are the report's
(rnnopt.report.intervals). The last column leaves a verdict out once the projection of
processes_to_decide puts it beyond the cap, which `rnnopt topup` does not do (docs/intervals.md).
Run: .venv/bin/python docs/simulate_topup.py (about a minute and a half).
"""

import numpy as np

from rnnopt.report.intervals import (
    FASTER,
    SAME,
    SLOWER,
    classify,
    processes_to_decide,
    ratio_interval,
)

SD, SPELL, RUNS, CAP = 0.015, 0.05, 3000, 20
rng = np.random.default_rng(4)


def times(n: int, speedup: float) -> list[float]:
    slowed = rng.uniform(0.05, 0.30, n) * (rng.random(n) < SPELL)
    return list(np.exp(-np.log(speedup) + rng.normal(0, SD, n) + slowed))


def verdict(speedup: float, cap: int, leave_out: bool = False) -> str:
    """leave_out: stop once the projection says the cap would not decide it (not the rule)."""
    base, cand = times(3, 1.0), times(3, speedup)
    found = ratio_interval(base, cand)
    while classify(found) == "inconclusive" and len(base) < cap:
        if leave_out and processes_to_decide(found, most=cap) is None:
            break
        base += times(1, 1.0)
        cand += times(1, speedup)
        found = ratio_interval(base, cand)
    return classify(found)


for speedup in (0.76, 1.03, 1.05, 1.066, 1.10, 1.13):
    cells = []
    for name, cap, leave_out in (
        ("3 processes", 3, False),
        ("top-up", CAP, False),
        ("top-up leaving out the projected out of reach", CAP, True),
    ):
        found = [verdict(speedup, cap, leave_out) for _ in range(RUNS)]
        agree = np.mean([a == b for a, b in zip(found[::2], found[1::2], strict=True)])
        wrong = (SAME, SLOWER) if speedup > 1.05 else (FASTER,) if speedup < 1.05 else ()
        decided = np.mean([v in (FASTER, SAME, SLOWER) for v in found])
        bad = np.mean([v in wrong for v in found]) if wrong else decided
        cells.append(f"{name}: agree {agree:.2f}, wrong {bad:.3f}")
    print(f"{speedup:.3f}x: " + "; ".join(cells))
