"""Precision's effect on the result (C6, C11): precision records (error against the float64
reference over one long sequence) beside the held-out loss after the same training (train
records, base setting) and the step time and peak memory at the small anchor shape.

Verdict, per run, variant and dtype other than float64: the loss of precision matters when
the hidden states are off the float64 reference by more than OUTPUT_ERROR_MATTERS (absolute;
h is in [-1, 1]) or the held-out loss differs by more than SAME_LOSS (relative) from the run
in the most precise dtype trained (REFERENCE_DTYPES: float64, else float32)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from rnnopt.report import wide  # noqa: E402
from rnnopt.report.experiments.rows import first_run, missing_row, number, ok_records  # noqa: E402
from rnnopt.report.figures import NoData  # noqa: E402
from rnnopt.report.verdicts import (  # noqa: E402
    OUTPUT_ERROR_MATTERS,
    SAME_LOSS,
)

# Held-out losses compare with the most precise of these dtypes that was trained.
REFERENCE_DTYPES = ("float64", "float32")


def precision_points(metrics: pd.DataFrame) -> pd.DataFrame:
    """Precision records with the held-out loss of the same variant and dtype after training
    (train records, base setting, any task: the first by task name) and of float64."""
    precision = ok_records(metrics, "precision")
    train = ok_records(metrics, "train")
    if precision.empty:
        return precision
    loss_metric = "heldout_loss" if "heldout_loss" in train else "final_loss"
    base = train[train["setting"].isin(["base"])] if not train.empty else train
    base = base.sort_values("task").drop_duplicates(["run", "variant", "dtype", "device"])
    held = base[["run", "variant", "dtype", "device", "task", loss_metric]].rename(
        columns={loss_metric: "heldout"}
    )
    frame = precision.drop(columns=["task"]).merge(
        held, on=["run", "variant", "dtype", "device"], how="left"
    )
    for dtype in REFERENCE_DTYPES:
        reference = held[held["dtype"] == dtype].drop(columns=["dtype", "task"])
        frame = frame.merge(
            reference.rename(columns={"heldout": f"heldout_{dtype}"}),
            on=["run", "variant", "device"],
            how="left",
        )
    frame["loss_metric"] = loss_metric
    for kind, metric, column in (
        ("profile", "time_ms.median", "step_ms"),
        ("memory", "peak_mib", "peak_mib"),
    ):
        frame = frame.merge(_at_anchor(ok_records(metrics, kind), metric, column), how="left")
    return frame.reset_index(drop=True)


def _at_anchor(frame: pd.DataFrame, metric: str, column: str) -> pd.DataFrame:
    """`metric` as `column` per (run, variant, dtype, device) at the small anchor shape
    (wide.NAMED_SHAPES), step phase, fewest threads: the speed and memory beside precision."""
    keys = ["run", "variant", "dtype", "device"]
    if frame.empty or metric not in frame:
        return pd.DataFrame(columns=[*keys, column])
    small = next(shape for shape, name in wide.NAMED_SHAPES.items() if name == "small")
    at = frame[[tuple(int(r[k]) for k in wide.SHAPE_KEYS) == small for _, r in frame.iterrows()]]
    at = wide.preferred(at)
    at = at[at["phase"] == "step"] if not at.empty else at
    return at[[*keys, metric]].drop_duplicates(keys).rename(columns={metric: column})


def loss_change(row) -> tuple[float, str] | None:
    """(relative change of the held-out loss, reference dtype) against the most precise
    dtype of REFERENCE_DTYPES (above this row's) whose training run exists; None if none."""
    heldout = number(row.get("heldout"))
    for dtype in REFERENCE_DTYPES:
        if dtype == row["dtype"]:
            return None
        reference = number(row.get(f"heldout_{dtype}"))
        if heldout is not None and reference:
            return (heldout - reference) / abs(reference), dtype
    return None


def precision_verdict(row) -> str:
    if row["dtype"] == "float64":
        return "reference dtype"
    error = row["output.max_abs_error"]
    change = loss_change(row)
    loss = f"held-out loss {change[0]:+.1%} vs {change[1]}" if change else None
    reasons = []
    if error > OUTPUT_ERROR_MATTERS:
        reasons.append(f"h off by {error:.1e} > {OUTPUT_ERROR_MATTERS:g}")
    if change is not None and change[0] > SAME_LOSS:
        reasons.append(loss)
    if reasons:
        return "precision lost: " + "; ".join(reasons)
    if change is not None and change[0] < -SAME_LOSS:
        # Lower precision ended lower: a different trajectory through the plateau, not a
        # loss of precision; the result still differs, and the row says so.
        return f"result differs, not worse: h within {error:.1e}, {loss}"
    after = f", {loss}" if loss else " (no more precise training run to compare the loss)"
    return f"no loss that matters: h within {error:.1e}{after}"


def precision_rows(metrics: pd.DataFrame, run: str) -> list[dict]:
    points = precision_points(metrics)
    points = points[points["run"] == run] if not points.empty else points
    if points.empty:
        return [missing_row("precision over a long sequence", "C6, C11", "no precision records")]
    rows = []
    for _, row in points.iterrows():
        heldout = number(row.get("heldout"))
        name = "held-out loss" if row["loss_metric"] == "heldout_loss" else "final loss"
        loss = f"; {name} {heldout:.4g} after training ({row['task']})" if heldout else ""
        growth = number(row.get("output.growth"))
        result = (
            f"T={row['seq_len']}: max |h - h_f64| {row['output.max_abs_error']:.2e} "
            f"(last step {row['output.last_step_abs_error']:.2e}"
            + (f", last/first tenth {growth:.2g}x" if growth is not None else "")
            + f"), worst gradient {row['gradients.worst']:.2e} relative{loss}"
        )
        for column, text in (("step_ms", "step {:.3g} ms"), ("peak_mib", "peak {:.3g} MiB")):
            if number(row.get(column)) is not None:
                result += "; " + text.format(row[column]) + " (small anchor)"
        rows.append(
            {
                "experiment": f"precision: {wide.label(row)}",
                "claim": "C6, C11",
                "result": result,
                "verdict": precision_verdict(row),
            }
        )
    return rows


def precision_error(metrics: pd.DataFrame, series: pd.DataFrame):
    records = wide.records(metrics, "precision")
    records = records[(records["status"] == "ok") & (records["dtype"] != "float64")]
    run, records = first_run(records, "precision records below float64")
    curves = series[
        (series["series"] == "error_per_step") & series["source"].isin(records["source"])
    ]
    if curves.empty:
        raise NoData("no error_per_step series in the precision records")
    curves = curves.merge(wide.with_labels(records)[["source", "label"]], on="source")
    curves = curves[curves["value"] > 0]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    sns.lineplot(curves, x="step", y="value", hue="label", ax=ax, linewidth=1)
    ax.set_yscale("log")
    ax.set_xlabel("time step t")
    ax.set_ylabel("max |h_t - h_t(float64)| over batch and units")
    ax.set_title(
        f"Error against float64 along the sequence, {run}: {wide.shape_text(records.iloc[0])}"
    )
    return fig
