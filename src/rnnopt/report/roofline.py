"""Where each profiled rung sits on the roofline, and which roof binds it.

A row's arithmetic intensity is its analytic FLOPs over its analytic traffic
(rnnopt.models.traffic). Its memory roof is the bandwidth of the level that holds a step's
working set (the weights and a step's gates and states: the smallest of the host's L1d, L2,
L3 that fits it, else DRAM), measured by the peak job of the same run at the same thread count
(rnnopt.measure.bandwidth: the best kernel at that level); its compute roof is the host's GEMM
ceiling for the dtype. What it can reach is min(ceiling, intensity x bandwidth):

- bound by "compute" when the ceiling is the lower roof, by "bandwidth (<level>)" otherwise;
- "overhead" when it reaches less than OVERHEAD_BELOW of that roof: more than half of its
  time is neither arithmetic at the ceiling nor traffic at the bandwidth (interpreter, launches,
  allocation), whatever roof it sits under.

`roof_fraction` is the share of that roof reached. Above 1 the model is wrong for that row,
not the machine: it counts more traffic than the rung moves (operands kept in cache between
operations), and the table says so.
"""

from __future__ import annotations

import pandas as pd

from rnnopt.models.flops import Shape
from rnnopt.models.traffic import step_working_set, traffic_bytes

OVERHEAD_BELOW = 0.5
LEVELS = (("l1d", "L1d"), ("l2", "L2"), ("l3", "L3"))
LEVEL_NAMES = {**dict(LEVELS), "dram": "DRAM"}
PLACED_COLUMNS = (
    "traffic_bytes",
    "intensity",
    "working_set_bytes",
    "memory_level",
    "bandwidth_gbs",
    "ceiling_gflops",
    "attainable_gflops",
    "bound_by",
    "roof_fraction",
)


def level_of(working_set: float, row, device: str) -> str | None:
    """'l1d' / 'l2' / 'l3' / 'dram': the smallest level that holds `working_set` bytes
    (the GPU: device memory); None when the host's cache sizes are unknown."""
    if device == "cuda":
        return "dram"
    sizes = [(key, row.get(f"{key}_bytes")) for key, _ in LEVELS]
    if any(size is None or pd.isna(size) for _, size in sizes):
        return None
    return next((key for key, size in sizes if working_set <= float(size)), "dram")


def bandwidth_roofs(peak_row, device: str) -> dict[str, float]:
    """level -> the best GB/s any bandwidth kernel reached there, from a peak row's columns."""
    prefix = f"bandwidth_gbs.{'cuda' if device == 'cuda' else 'cpu'}."
    roofs: dict[str, float] = {}
    for column, value in peak_row.items():
        if isinstance(column, str) and column.startswith(prefix) and pd.notna(value):
            level = column[len(prefix) :].split(".")[0]
            roofs[level] = max(roofs.get(level, 0.0), float(value))
    return roofs


def gemm_ceilings(peak_row, device: str) -> dict[str, tuple[float, str]]:
    """dtype -> (best GEMM GFLOP/s of any library on `device`, that library): the compute
    roof. The CPU's libraries (numpy, torch) compete; on a GPU its own GEMM (cuda)."""
    best: dict[str, tuple[float, str]] = {}
    for column, value in peak_row.items():
        if not (isinstance(column, str) and column.startswith("gemm_gflops.")) or pd.isna(value):
            continue
        _, library, dtype = column.split(".")
        if (library == "cuda") == (device == "cuda") and value > best.get(dtype, (0.0, ""))[0]:
            best[dtype] = (float(value), library)
    return best


def place(row, peak_row) -> dict:
    """The roofline columns of one profile row: intensity, level, roofs, bound_by,
    roof_fraction (None where the row or its run's peak record lacks what they need)."""
    kind = row["variant"].rsplit("-", 1)[-1]
    shape = Shape(*(int(row[key]) for key in ("batch", "seq_len", "input_size", "hidden_size")))
    traffic = traffic_bytes(kind, row["cell"], shape, row["dtype"], row["phase"])["total"]
    working_set = step_working_set(row["cell"], shape, row["dtype"])
    placed = dict.fromkeys(PLACED_COLUMNS)
    placed.update(
        traffic_bytes=traffic,
        intensity=row["flops"] / traffic,
        working_set_bytes=working_set,
        memory_level=level_of(working_set, row, row["device"]),
    )
    if peak_row is None or placed["memory_level"] is None:
        return placed
    bandwidth = bandwidth_roofs(peak_row, row["device"]).get(placed["memory_level"])
    ceiling, _ = gemm_ceilings(peak_row, row["device"]).get(row["dtype"], (None, None))
    if bandwidth is None or ceiling is None:
        return placed
    memory_roof = placed["intensity"] * bandwidth
    attainable = min(ceiling, memory_roof)
    fraction = row["gflops"] / attainable
    bound = (
        "compute"
        if ceiling <= memory_roof
        else f"bandwidth ({LEVEL_NAMES[placed['memory_level']]})"
    )
    placed.update(
        bandwidth_gbs=bandwidth,
        ceiling_gflops=ceiling,
        attainable_gflops=attainable,
        bound_by="overhead" if fraction < OVERHEAD_BELOW else bound,
        roof_fraction=fraction,
    )
    return placed


def peak_row_of(peaks: pd.DataFrame, run: str, threads) -> pd.Series | None:
    """The peak record of `run` measured at `threads` (its bandwidth and ceilings), or None."""
    if peaks.empty:
        return None
    same = peaks[(peaks["run"] == run) & (peaks["threads"] == threads)]
    same = same[same["status"] == "ok"] if "status" in same else same
    return None if same.empty else same.iloc[0]


def roofline_points(profile: pd.DataFrame, peaks: pd.DataFrame) -> pd.DataFrame:
    """Every ok profile row with GFLOP/s, with its roofline columns (`place`)."""
    rows = profile[(profile["status"] == "ok") & profile["gflops"].notna()]
    rows = rows[rows["cell"].isin(("lstm", "rnn"))]
    placed = [place(r, peak_row_of(peaks, r["run"], r["threads"])) for _, r in rows.iterrows()]
    extra = pd.DataFrame(placed, index=rows.index, columns=list(PLACED_COLUMNS))
    return pd.concat([rows, extra], axis=1)


def bound_text(bound_by, fraction) -> str:
    """'compute, 72% of roof' for a table cell; '-' where not placed."""
    if bound_by is None or pd.isna(bound_by) or fraction is None or pd.isna(fraction):
        return "-"
    text = f"{bound_by}, {100 * fraction:.0f}% of roof"
    if fraction > 1:
        text += " (above the roof: the traffic model over-counts this rung's bytes)"
    return text
