"""Rows measured at several shapes are judged per shape; the verdict says where a claim holds."""

import pandas as pd

from rnnopt.report import table
from rnnopt.report.comparisons import Comparison, Side
from rnnopt.report.measure import Interval, Outcome
from rnnopt.report.verdicts import verdict

ROW = Comparison("hoisting", ("C13",), Side("numpy-*-fused"), Side("numpy-*-batched"))
FAST = Interval(1.9, 1.7, 2.1)
FLAT = Interval(1.0, 0.9, 1.1)


def shaped(**speeds: Interval) -> Outcome:
    return Outcome(speedup=FAST, by_shape={s: Outcome(speedup=v) for s, v in speeds.items()})


def test_a_claim_that_depends_on_the_shape_says_where_it_holds():
    text = verdict(ROW, shaped(small=FLAT, fastrnns=FAST))
    assert text.startswith("depends on the shape: holds at fastrnns (1.90x (1.70-2.10))")
    assert "not at small (no clear speedup (0.90-1.10x))" in text


def test_every_shape_and_no_shape():
    assert verdict(ROW, shaped(small=FAST, fastrnns=FAST)).startswith(
        "supported at every shape measured (small 1.90x"
    )
    assert verdict(ROW, shaped(small=FLAT, fastrnns=FLAT)).startswith(
        "not supported at any shape (small: no clear speedup"
    )


def test_a_shape_without_measurements_is_left_out_and_one_shape_is_judged_alone():
    text = verdict(ROW, shaped(small=FAST, fastrnns=None))
    assert text == "supported at every shape measured (small 1.90x (1.70-2.10))"
    assert verdict(ROW, Outcome(speedup=FLAT)).startswith("not supported: no clear speedup")


def test_failed_verification_overrides_every_shape():
    outcome = shaped(small=FAST, fastrnns=FAST)
    outcome.unverified = ["numpy-lstm-fused float32 cpu"]
    assert verdict(ROW, outcome).startswith("not measured here: failed verification")


def test_peak_fraction_above_one_says_the_ceiling_is_wrong():
    assert table._peak_percent(pd.Series({"peak_fraction": 0.82})) == "82.0"
    assert "ceiling wrong" in table._peak_percent(pd.Series({"peak_fraction": 1.11}))
