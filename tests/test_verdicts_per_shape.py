"""Rows measured at several shapes are judged per shape; the verdict says where a claim holds."""

import pandas as pd

from rnnopt.report import table
from rnnopt.report.comparisons import Comparison, Side
from rnnopt.report.intervals import Interval
from rnnopt.report.outcomes import Outcome
from rnnopt.report.verdicts import verdict, verdict_category

ROW = Comparison("hoisting", ("C13",), Side("numpy-*-fused"), Side("numpy-*-batched"))
FAST = Interval(1.9, 1.7, 2.1, (3, 3))
FLAT = Interval(1.0, 0.97, 1.03, (3, 3))  # inside the 5% threshold: no meaningful difference
WIDE = Interval(1.0, 0.9, 1.1, (3, 3))  # crosses it: inconclusive


def shaped(**speeds: Interval) -> Outcome:
    return Outcome(speedup=FAST, by_shape={s: Outcome(speedup=v) for s, v in speeds.items()})


def test_a_claim_that_depends_on_the_shape_says_where_it_holds():
    text = verdict(ROW, shaped(small=FLAT, fastrnns=FAST))
    assert text.startswith("depends on the shape: holds at fastrnns (1.90x (1.70-2.10))")
    assert "not at small (no meaningful difference (1.00x (0.97-1.03): within 5%))" in text


def test_every_shape_and_no_shape():
    assert verdict(ROW, shaped(small=FAST, fastrnns=FAST)).startswith(
        "supported at every shape measured (small 1.90x"
    )
    assert verdict(ROW, shaped(small=FLAT, fastrnns=FLAT)).startswith(
        "not supported at any shape (small: no meaningful difference"
    )


def test_a_shape_that_cannot_decide_makes_the_row_inconclusive():
    text = verdict(ROW, shaped(small=WIDE, fastrnns=FAST))
    assert (
        text == "inconclusive at small (1.00x (0.90-1.10)); holds at fastrnns (1.90x (1.70-2.10))"
    )
    assert verdict_category(text) == "inconclusive"
    both = verdict(ROW, shaped(small=WIDE, fastrnns=FAST, cache=FLAT))
    assert both.startswith("depends on the shape: holds at fastrnns") and "inconclusive at" in both
    assert verdict_category(both) == "depends on the shape"


def test_one_process_a_side_is_not_judged():
    one = Outcome(speedup=Interval(1.9, processes=(1, 1)))
    assert verdict(ROW, one) == "not judged: 1.90x: one process a side: no interval"


def test_a_shape_without_measurements_is_left_out_and_one_shape_is_judged_alone():
    text = verdict(ROW, shaped(small=FAST, fastrnns=None))
    assert text == "supported at every shape measured (small 1.90x (1.70-2.10))"
    assert verdict(ROW, Outcome(speedup=FLAT)).startswith("not supported: no meaningful diff")


def test_failed_verification_overrides_every_shape():
    outcome = shaped(small=FAST, fastrnns=FAST)
    outcome.unverified = ["numpy-lstm-fused float32 cpu"]
    assert verdict(ROW, outcome).startswith("not measured here: failed verification")


def test_peak_fraction_above_one_says_the_ceiling_is_wrong():
    assert table._peak_percent(pd.Series({"peak_fraction": 0.82})) == "82.0"
    assert "ceiling wrong" in table._peak_percent(pd.Series({"peak_fraction": 1.11}))


def test_memory_pairs_need_one_instrument():
    from rnnopt.report.outcomes import PEAK_METRIC, pairs, ratio

    def row(variant, source, peak):
        return {
            "variant": variant,
            "dtype": "float32",
            "device": "cpu",
            "status": "ok",
            "cell": "lstm",
            "task": None,
            "phase": "step",
            "batch": 16,
            "seq_len": 20,
            "input_size": 32,
            "hidden_size": 64,
            "threads": 1,
            "setting": None,
            "peak_source": source,
            PEAK_METRIC: peak,
        }

    same = pd.DataFrame(
        [row("torch-lstm-nn", "memray", 2.4), row("numpy-lstm-fused", "memray", 1.4)]
    )
    mixed = pd.DataFrame([row("torch-lstm-nn", "memray", 2.4), row("numpy-lstm-fused", "rss", 0.0)])
    nn, fused = Side("torch-*-nn", "float32"), Side("numpy-*-fused", "float32")
    keys = ("peak_source",)
    assert ratio(pairs(same, nn, fused, extra_keys=keys), PEAK_METRIC) == 2.4 / 1.4
    assert pairs(mixed, nn, fused, extra_keys=keys).empty


def test_a_shape_a_side_skipped_is_named_in_the_row(tmp_path):
    from rnnopt.report.aggregate import collect
    from tests.test_aggregate import CPU_RUN, Results

    results = Results(tmp_path / "results")
    fastrnns = {"batch": 64, "seq_len": 100, "input_size": 512, "hidden_size": 512}
    results.profile(CPU_RUN, "torch-lstm-nn", "float32", 2.0)
    results.profile(CPU_RUN, "torch-lstm-nn", "bfloat16", 4.0)
    results.profile(CPU_RUN, "torch-lstm-nn", "float32", 1200.0, **fastrnns)
    reason = "UnavailableError: no native bfloat16 on this CPU (no avx512_bf16 flag): emulated"
    results.profile(
        CPU_RUN, "torch-lstm-nn", "bfloat16", 0, status="skipped", reason=reason, **fastrnns
    )
    rows = table.comparison_table(collect(tmp_path / "results")[0]).set_index("optimisation")
    speed = rows.loc["mixed precision (bfloat16, CPU)", f"{CPU_RUN}: speedup"]
    assert speed.startswith("0.50x")
    assert "not at fastrnns: skipped: no native bfloat16 on this CPU (no avx512_bf16 flag)" in speed
    # a row measured at every shape of its records says nothing of the kind
    assert "not at" not in rows.loc["library kernels (nn.LSTM vs hand-written cell)"].to_string()
