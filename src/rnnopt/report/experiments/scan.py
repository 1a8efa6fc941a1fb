"""The report's section "New architectures: parallel scan": minGRU and minLSTM, the sequential
loop against the log-space scan per sequence length, beside nn.LSTM, with the paper's
published GPU speedups as an outside scale."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import matplotlib.ticker
import pandas as pd
import seaborn as sns

from rnnopt.models.params import SCAN_CELLS
from rnnopt.report import wide
from rnnopt.report.figures import NoData, _plain_log, save_figures
from rnnopt.report.intervals import geometric_mean
from rnnopt.report.verdicts import LEARNED_RATIO
from rnnopt.report.wide import NONE

LSTM = "torch-lstm-nn"
SIZES = ("batch", "input_size", "hidden_size")
ABOUT = (
    "Guide section 7 (new architectures): minGRU and minLSTM (Feng et al. 2024, 'Were RNNs "
    "All We Needed?') compute their gates from x_t alone, so h_t = a_t h_{t-1} + b_t is one "
    "log-space parallel scan over time (Heinsen 2023) instead of T dependent steps. Per "
    "sequence length T, float32, one training step (forward, backward, SGD update) on the "
    "fewest threads: the loop's and the scan's time (geometric mean over processes of each "
    "process's 10th-percentile call, as the speedups), the scan's speedup, nn.LSTM at the "
    "same sizes and its time over the scan's, and the scan's peak heap over the loop's "
    "(memray, when measured). "
    "The verdict per T is the comparison table's row 'parallel scan'. The paper's rows are "
    "its published T4 GPU figures (B=64, against the sequential GRU and LSTM): a scale, not "
    "a verdict."
)
PUBLISHED = "Feng et al. 2024 (published: T4 GPU, B=64)"
# Training-step speedup of the parallel scan over the sequential GRU / LSTM, and memory.
PUBLISHED_SPEEDUPS = (
    ("mingru", 512, "175x (vs GRU)"),
    ("minlstm", 512, "235x (vs LSTM)"),
    ("mingru", 4096, "1324x (vs GRU)"),
    ("minlstm", 4096, "1361x (vs LSTM)"),
)
PUBLISHED_MEMORY = "1.88x (vs GRU / LSTM)"
COLUMNS = (
    "run", "device", "framework", "cell", "sizes", "T", "loop ms", "scan ms", "scan vs loop",
    "nn.LSTM ms", "scan vs nn.LSTM", "scan peak / loop peak",
)  # fmt: skip


def _time(row) -> float:
    """The geometric mean of the processes' times, as the speedups divide them."""
    times = row.get("process_times")
    if isinstance(times, tuple) and times:
        return geometric_mean(times)
    return float(row["time_ms.median"])


def sweep_rows(metrics: pd.DataFrame) -> pd.DataFrame:
    """ok float32 step rows of the scan cells and of nn.LSTM, fewest threads, with `ms`."""
    profile = wide.records(metrics, "profile")
    if profile.empty:
        return profile
    keep = (
        (profile["status"] == "ok")
        & (profile["dtype"] == "float32")
        & (profile["phase"] == "step")
        & (profile["cell"].isin(SCAN_CELLS) | (profile["variant"] == LSTM))
    )
    rows = profile[keep]
    if rows.empty:
        return rows
    rows = rows[rows["threads"] == rows.groupby(["run", "device"])["threads"].transform("min")]
    return rows.assign(ms=[_time(row) for _, row in rows.iterrows()])


def _peaks(metrics: pd.DataFrame) -> pd.DataFrame:
    memory = wide.records(metrics, "memory")
    if memory.empty or "peak_mib" not in memory:
        return memory
    return memory[(memory["status"] == "ok") & (memory["phase"] == "step")]


def _one(frame: pd.DataFrame, **fixed) -> float | None:
    match = frame
    for key, value in fixed.items():
        match = match[match[key] == value]
    column = "ms" if "ms" in match else "peak_mib"
    return float(match[column].iloc[0]) if len(match) else None


def _ratio(numerator, denominator) -> str:
    if numerator is None or denominator is None or denominator <= 0:
        return NONE
    return f"{numerator / denominator:.2f}x"


def _ms(value) -> str:
    return NONE if value is None else f"{value:.3g}"


def table(metrics: pd.DataFrame) -> pd.DataFrame:
    """One row per run, device, framework, scan cell, sizes and T; then the paper's rows."""
    rows = sweep_rows(metrics)
    peaks = _peaks(metrics)
    found = []
    scan_rows = rows[rows["cell"].isin(SCAN_CELLS)] if len(rows) else rows
    keys = ["run", "device", "framework", "cell", *SIZES, "seq_len"]
    for values, group in scan_rows.groupby(keys) if len(scan_rows) else ():
        run, device, framework, cell, batch, inputs, hidden, seq_len = values
        at = {"run": run, "device": device, "batch": batch, "input_size": inputs,
              "hidden_size": hidden, "seq_len": seq_len}  # fmt: skip
        loop_name, scan_name = (f"{framework}-{cell}-{kind}" for kind in ("seq", "scan"))
        loop, scan = _one(group, variant=loop_name), _one(group, variant=scan_name)
        lstm = _one(rows, variant=LSTM, **at)
        peak_loop = _one(peaks, variant=loop_name, **at) if len(peaks) else None
        peak_scan = _one(peaks, variant=scan_name, **at) if len(peaks) else None
        found.append(
            {
                "run": run,
                "device": device,
                "framework": framework,
                "cell": cell,
                "sizes": f"B{batch} I{inputs} H{hidden}",
                "T": int(seq_len),
                "loop ms": _ms(loop),
                "scan ms": _ms(scan),
                "scan vs loop": _ratio(loop, scan),
                "nn.LSTM ms": _ms(lstm),
                "scan vs nn.LSTM": _ratio(lstm, scan),
                "scan peak / loop peak": _ratio(peak_scan, peak_loop),
            }
        )
    for cell, seq_len, speedup in PUBLISHED_SPEEDUPS:
        found.append(
            dict.fromkeys(COLUMNS, NONE)
            | {
                "run": PUBLISHED,
                "device": "cuda",
                "framework": "torch",
                "cell": cell,
                "sizes": "B64",
                "T": seq_len,
                "scan vs nn.LSTM": speedup,
                "scan peak / loop peak": PUBLISHED_MEMORY,
            }  # fmt: skip
        )
    return pd.DataFrame(found, columns=list(COLUMNS))


TRAINING_ABOUT = (
    "Does the cheaper recurrence learn? minGRU and minLSTM trained like the LSTMs (same "
    "task, batches, optimiser and hidden size; their own initial weights), float32: final "
    "held-out loss, as a share of the predict-the-mean baseline, learned when at most "
    f"{LEARNED_RATIO:.0%} of it (the verdicts' rule), and over nn.LSTM's held-out loss on the "
    "same task and steps. The loop and the scan of one cell compute one function: their "
    "curves agree to float32 rounding (loss-curve figure)."
)
TRAINING_COLUMNS = (
    "run", "task", "variant", "steps", "held-out loss", "of predict-the-mean", "learned",
    "vs nn.LSTM",
)  # fmt: skip


def training_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """One row per run, task and scan-cell variant trained (base setting, float32), with
    nn.LSTM's row of the same run, task and steps beside it."""
    train = wide.records(metrics, "train")
    if train.empty:
        return pd.DataFrame(columns=list(TRAINING_COLUMNS))
    train = train[
        (train["status"] == "ok")
        & (train["setting"] == "base")
        & (train["dtype"] == "float32")
        & (train["cell"].isin(SCAN_CELLS) | (train["variant"] == LSTM))
    ]
    found = []
    for _, row in train[train["cell"].isin(SCAN_CELLS)].iterrows():
        lstm = train[
            (train["variant"] == LSTM)
            & (train["run"] == row["run"])
            & (train["task"] == row["task"])
            & (train["steps_completed"] == row["steps_completed"])
        ]
        ratio = row["heldout_loss_ratio"]
        found.append(
            {
                "run": row["run"],
                "task": row["task"],
                "variant": row["variant"],
                "steps": int(row["steps_completed"]),
                "held-out loss": f"{row['heldout_loss']:.3g}",
                "of predict-the-mean": f"{ratio:.1%}" if pd.notna(ratio) else NONE,
                "learned": NONE if pd.isna(ratio) else ("yes" if ratio <= LEARNED_RATIO else "no"),
                "vs nn.LSTM": _ratio(row["heldout_loss"], lstm["heldout_loss"].iloc[0])
                if len(lstm)
                else NONE,
            }
        )
    return pd.DataFrame(found, columns=list(TRAINING_COLUMNS))


def scan_figure(metrics: pd.DataFrame):
    """Time per training step against T: loop and scan of each scan cell, and nn.LSTM, at the
    sizes the scan cells were swept most at."""
    rows = sweep_rows(metrics)
    scan_rows = rows[rows["cell"].isin(SCAN_CELLS)] if len(rows) else rows
    if scan_rows.empty:
        raise NoData("no ok float32 step records of minGRU / minLSTM")
    counts = scan_rows.groupby(list(SIZES))["seq_len"].nunique()
    if counts.max() < 2:
        raise NoData("no minGRU / minLSTM records sweeping T")
    sizes = dict(zip(SIZES, counts.idxmax(), strict=True))
    data = rows[(rows[list(SIZES)] == pd.Series(sizes)).all(axis=1)]
    swept = data[data["cell"].isin(SCAN_CELLS)]["seq_len"].unique()
    data = data[data["seq_len"].isin(swept)]  # nn.LSTM's other sweeps at these sizes: not here
    data = wide.with_labels(data).sort_values(["label", "seq_len"])
    fig, ax = plt.subplots(figsize=(8, 5.5))
    sns.lineplot(data=data, x="seq_len", y="ms", hue="label", style="run", markers=True,
                 dashes=False, ax=ax)  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(sorted(data["seq_len"].unique()))
    ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    _plain_log(ax.yaxis)
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("sequence length T (log scale)")
    ax.set_ylabel("time per training step, ms (log scale)")
    ax.set_title(
        "Parallel scan vs sequential loop (minGRU, minLSTM) and nn.LSTM\n"
        f"B={sizes['batch']}, I={sizes['input_size']}, H={sizes['hidden_size']}, float32, step"
    )
    ax.legend(fontsize=7, loc="best")
    return fig


FIGURES = ("scan_vs_seq_len",)


def draw(metrics: pd.DataFrame, out_dir: str | Path) -> dict[str, str]:
    """Write out_dir/scan_vs_seq_len.png; name -> "" or why it holds no data."""
    return save_figures({"scan_vs_seq_len": lambda: scan_figure(metrics)}, out_dir)
