"""The tidy metrics table reshaped the way tables and figures read it: one row per record."""

from __future__ import annotations

import pandas as pd

from rnnopt.report.aggregate import RECORD_COLUMNS, SHAPE_KEYS

# Metrics the tables and figures read: always present as columns (NaN where not measured).
USED_METRICS = (
    "time_ms.median",
    "time_ms.iqr",
    "time_ms.min",
    "time_ms.n",
    "tokens_per_s",
    "flops",
    "gflops",
    "peak_fraction",
    "compile_s",
    "noisy",
    "peak_mib",
    "kept_mib",
    "minimum_mib",
    "peak_over_minimum",
    "heap.library_buffers_mib",
    "tracemalloc.numpy_blocks_per_step",
    "final_loss",
    "baseline_loss",
    "heldout_loss",
    "heldout_baseline_loss",
    "heldout_loss_ratio",
    "steps_completed",
    "time_per_step_ms",
    "clip_fraction",
    "passed",
    "tolerance",
    "cuda_kernel_launches",
    "cudnn_persistent",
)
NONE = "-"  # a table cell with nothing measured
DTYPE_SHORT = {
    "float64": "f64",
    "float32": "f32",
    "tfloat32": "tf32",
    "bfloat16": "bf16",
    "float16": "f16",
}


def records(metrics: pd.DataFrame, kind: str) -> pd.DataFrame:
    """Records of `kind`: the descriptive columns plus one column per metric (NaN if absent).

    Text columns hold str or None (not pandas' NA), so that row-wise code can test them.
    """
    rows = metrics[metrics["kind"] == kind]
    described = rows.drop_duplicates("source")[[*RECORD_COLUMNS, "source"]].copy()
    for column in described.columns:
        if pd.api.types.is_string_dtype(described[column]):
            text = described[column].astype(object)
            described[column] = text.where(text.notna(), None)
    measured = rows.dropna(subset=["metric"])
    values = measured.pivot(index="source", columns="metric", values="value")
    values.columns.name = None
    missing = [m for m in USED_METRICS if m not in values]
    values = values.reindex(columns=[*values.columns, *missing])
    frame = described.merge(values, left_on="source", right_index=True, how="left")
    return frame.reset_index(drop=True)


def label(row) -> str:
    """numpy-lstm-fused f32, torch-lstm-nn f16 cuda: how tables and legends name a variant."""
    text = f"{row['variant']} {DTYPE_SHORT.get(row['dtype'], row['dtype'])}"
    return text + (f" {row['device']}" if row["device"] not in ("cpu", None) else "")


def with_labels(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.copy()
    frame["label"] = [label(row) for _, row in frame.iterrows()] if len(frame) else []
    return frame


def shape_text(row) -> str:
    return "B{batch} T{seq_len} I{input_size} H{hidden_size}".format(
        **{key: row[key] for key in SHAPE_KEYS}
    )


# The anchor shapes of the default config, by name: (batch, seq_len, input_size, hidden_size).
NAMED_SHAPES = {(16, 20, 32, 64): "small", (64, 100, 512, 512): "fastrnns"}


def shape_label(row) -> str:
    """'small', 'fastrnns' or 'B4 T20 I32 H64': how verdicts name a shape."""
    key = tuple(int(row[k]) for k in SHAPE_KEYS)
    return NAMED_SHAPES.get(key) or shape_text(row)


def preferred(frame: pd.DataFrame, phase: str = "step") -> pd.DataFrame:
    """Rows at the preferred phase (if any) and at the smallest thread count: the anchor."""
    if frame.empty:
        return frame
    if (frame["phase"] == phase).any():
        frame = frame[frame["phase"] == phase]
    if frame["threads"].notna().any():
        frame = frame[frame["threads"] == frame["threads"].min()]
    return frame


def verification(metrics: pd.DataFrame) -> pd.DataFrame:
    """One row per verify record: run, variant, dtype, device, status, reason, passed, errors."""
    return records(metrics, "verify")


def failed_verification(metrics: pd.DataFrame) -> set[tuple[str, str, str, str]]:
    """(run, variant, dtype, device) whose verification ran and failed (or broke)."""
    verify = verification(metrics)
    if verify.empty:
        return set()
    passed = verify["passed"] if "passed" in verify else pd.Series(float("nan"), verify.index)
    bad = verify[(verify["status"] == "failed") | ((verify["status"] == "ok") & (passed != 1))]
    return {tuple(row) for row in bad[["run", "variant", "dtype", "device"]].itertuples(False)}


def runs(metrics: pd.DataFrame, placeholder: bool = False) -> list[str]:
    """The runs in `metrics`, sorted; with `placeholder`, [NONE] where there is none, for
    tables that keep a row saying so."""
    found = sorted(metrics["run"].dropna().unique())
    return found or ([NONE] if placeholder else [])
