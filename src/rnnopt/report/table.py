"""The report's tables as DataFrames: optimisation comparison, verification, variant detail,
measurement checks. Every run (host) gets its own columns, side by side."""

from __future__ import annotations

import pandas as pd

from rnnopt.report import wide
from rnnopt.report.comparisons import COMPARISONS, Comparison
from rnnopt.report.intervals import CONFIDENCE, THRESHOLD, classify, differs_from_reference
from rnnopt.report.outcomes import Outcome, RunData, job_text, measure
from rnnopt.report.roofline import bound_text, roofline_points
from rnnopt.report.verdicts import (
    per_shape,
    reading_matters,
    single_verdict,
    verdict,
    verdict_category,
)
from rnnopt.report.wide import NONE, runs

ALL_SHAPES = "all"  # comparison_numbers' row for the whole comparison (its verdict)
COMPARISON_COLUMNS = (
    *("optimisation", "claim", "compared", "run", "shape"),
    *("speedup", "low", "high", "processes", "se_log", "welch_df", "run_sd_log"),
    *("speed", "memory_ratio", "verdict", "category"),
    *("reference_runs", "reference_agree", "reference_readings"),
    *("reference_speedup", "reference_low", "reference_high", "reference_agrees"),
)


def run_data(
    metrics: pd.DataFrame, confidence: float = CONFIDENCE, spread: dict | None = None
) -> dict[str, RunData]:
    """Each run's wide frames; `spread`: run -> its pairs' between-run spread
    (rnnopt.report.rerun_spread.read), for the runs that have one."""
    frames = {kind: wide.records(metrics, kind) for kind in ("profile", "memory", "train")}
    failed = wide.failed_verification(metrics)
    return {
        run: RunData(
            *(frames[kind][frames[kind]["run"] == run] for kind in ("profile", "memory", "train")),
            failed_verification=failed,
            confidence=confidence,
            spread=(spread or {}).get(run, {}),
        )
        for run in runs(metrics)
    }


def outcomes(metrics: pd.DataFrame, comparisons, confidence: float, spread: dict | None = None):
    """(comparison, run, outcome) of every comparison in every run."""
    data = run_data(metrics, confidence, spread)
    for comparison in comparisons:
        for run, run_frames in data.items():
            yield comparison, run, measure(comparison, run_frames, run)


def _speed_cell(outcome: Outcome) -> str:
    speed = outcome.speed_text or (str(outcome.speedup) if outcome.speedup else NONE)
    if outcome.gc_share is not None:
        candidate, baseline = outcome.gc_share
        speed += f"; GC {baseline:.1%} -> {candidate:.1%} of time"
    return speed


def _memory_cell(outcome: Outcome) -> str:
    memory = f"{outcome.memory_ratio:.2f}x" if outcome.memory_ratio is not None else NONE
    if outcome.allocations is not None:
        candidate, baseline = outcome.allocations
        memory += f"; buffers/step {baseline:.1f} -> {candidate:.1f}"
    return memory


def _by_shape(outcome: Outcome, cell) -> str:
    """`small: 2.1x; fastrnns: 1.0x` over the shapes measured, or the one value."""
    if not outcome.by_shape:
        return cell(outcome)
    shown = [(s, cell(o)) for s, o in outcome.by_shape.items()]
    shown = [(s, text) for s, text in shown if text != NONE]
    return "; ".join(f"{s}: {text}" for s, text in shown) or NONE


def reference_reads(
    outcome: Outcome, pairs: dict, threshold: float
) -> tuple[str, dict[str, int]] | None:
    """(this run's reading of the speedup, how the host's reference runs read it: reading ->
    runs; rnnopt.report.rerun_spread) for a speedup that rests on one pair with reads in the
    host's rerun spread `pairs`; None otherwise."""
    s = outcome.speedup
    if s is None or not s.has_interval or len(outcome.jobs) != 2:
        return None
    found = pairs.get(tuple(job_text(job) for job in outcome.jobs))
    if found is None or not found.reads:
        return None
    return classify(s, threshold), found.reads


def rerun_note(comparison: Comparison, outcome: Outcome, pairs: dict, threshold: float) -> str:
    """Where the host's reference runs did not all read a speedup as this run does, and
    another reading would change the verdict's category: how they read it (at each shape of a
    row measured at several). A verdict near the threshold can read otherwise on a rerun
    however well each run measures (docs/intervals.md, "Verdicts near the threshold"); this
    says where that has happened on this host. None on a row whose variants failed
    verification (its verdict rests on no speedup)."""
    if outcome.unverified:
        return ""
    parts = []
    for label, one in outcome.by_shape.items() or [("", outcome)]:
        found = reference_reads(one, pairs, threshold)
        if found is None or one.speedup.reads_reference:
            continue  # a verdict read over the reference runs does not move with this run's
        reading, reads = found
        others = [what for what, n in reads.items() if n and what != reading]
        shaped = per_shape(outcome, one) if label else outcome
        if not reading_matters(comparison, shaped, others, threshold):
            continue
        total = sum(reads.values())
        shown = ", ".join(f"{n} {what}" for what, n in reads.items() if n)
        parts.append(f"at {label}: " * bool(label) + f"{shown} of {total}")
    if not parts:
        return ""
    read = "; ".join(parts)
    return f" (a rerun may read otherwise: this host's reference runs read the speedup {read})"


def differs_note(outcome: Outcome) -> str:
    """Where this run's speedup lies outside what the host's reference runs predict for a
    run (intervals.with_reference): the verdict is this run's own, and says so. Something
    changed since those runs (code, libraries, the host), or this run met a rare shift."""
    if outcome.unverified:
        return ""
    parts = []
    for label, one in outcome.by_shape.items() or [("", outcome)]:
        s = one.speedup
        if s is None or s.agrees is not False or s.reference is None:
            continue
        parts.append(f"at {label}: " * bool(label) + s.against_reference())
    if not parts:
        return ""
    shapes = outcome.by_shape.values() or [outcome]
    runs = max(o.speedup.reference_runs for o in shapes if o.speedup is not None)
    return differs_from_reference(runs, parts)


def _cells(
    comparison: Comparison, outcome: Outcome, threshold: float, pairs: dict
) -> dict[str, str]:
    speed = _by_shape(outcome, _speed_cell)
    if outcome.notes:
        speed += f" ({'; '.join(outcome.notes)})"
    memory = _by_shape(outcome, _memory_cell)
    if outcome.loss_text:
        loss = outcome.loss_text
    elif outcome.loss_change is not None:
        loss = f"{outcome.loss_change:+.1%}"
    else:
        loss = NONE
    return {
        "speedup": speed,
        "peak memory": memory,
        "loss": loss,
        "verdict": verdict(comparison, outcome, threshold)
        + differs_note(outcome)
        + rerun_note(comparison, outcome, pairs, threshold),
    }


def comparison_table(
    metrics: pd.DataFrame,
    comparisons=COMPARISONS,
    threshold: float = THRESHOLD,
    confidence: float = CONFIDENCE,
    spread: dict | None = None,
) -> pd.DataFrame:
    """One row per optimisation; per run: speedup (interval), peak memory, loss, verdict (and
    how the host's reference runs read the speedup where they did not all read it as this
    run: rerun_note). The page's text; comparison_numbers holds its numbers."""
    rows = {c.optimisation: {"optimisation": c.optimisation} for c in comparisons}
    for comparison in comparisons:
        rows[comparison.optimisation] |= {
            "claim": ", ".join(comparison.claims),
            "compared": comparison.compared,
        }
    for comparison, run, outcome in outcomes(metrics, comparisons, confidence, spread):
        cells = _cells(comparison, outcome, threshold, (spread or {}).get(run, {}))
        rows[comparison.optimisation].update({f"{run}: {k}": v for k, v in cells.items()})
    return pd.DataFrame(list(rows.values()))


def _numbers(outcome: Outcome, pairs: dict, threshold: float) -> dict:
    s = outcome.speedup
    has = s is not None and s.has_interval
    found = reference_reads(outcome, pairs, threshold)
    reading, reads = found if found is not None else (None, {})
    pooled = s.reference if s is not None else None
    return {
        "speedup": s.median if s is not None else None,
        "low": s.low if has else None,
        "high": s.high if has else None,
        "processes": s.n if s is not None else None,
        "se_log": s.se if s is not None else None,
        "welch_df": s.df if s is not None else None,
        "run_sd_log": s.run_sd if s is not None else None,
        "speed": _speed_cell(outcome),
        "memory_ratio": outcome.memory_ratio,
        "reference_runs": sum(reads.values()) if reads else None,
        "reference_agree": reads.get(reading, 0) if reads else None,
        "reference_readings": sum(1 for n in reads.values() if n) if reads else None,
        "reference_speedup": pooled.median if pooled is not None else None,
        "reference_low": pooled.low if pooled is not None else None,
        "reference_high": pooled.high if pooled is not None else None,
        "reference_agrees": s.agrees if pooled is not None else None,
    }


def comparison_numbers(
    metrics: pd.DataFrame,
    comparisons=COMPARISONS,
    threshold: float = THRESHOLD,
    confidence: float = CONFIDENCE,
    spread: dict | None = None,
) -> pd.DataFrame:
    """The comparison table as numbers: one row per comparison, run and shape (shape `all`:
    the whole row, its verdict; then one row per shape of a row measured at several), with
    speedup, low, high (its interval; empty with one process), processes (of the side with
    fewer), se_log and welch_df (the standard error of the log speedup and its Welch degrees
    of freedom, where the speedup rests on one pair of jobs: what `rnnopt compare` needs to
    test a change between two runs; both include run_sd_log, the host's between-run spread
    where measured: rnnopt.report.rerun_spread), speed (the text), memory_ratio (exact:
    memray peaks are deterministic), verdict and its category (verdicts.CATEGORIES), and for a
    speedup of one pair with reads in the host's rerun spread, reference_runs (how many runs
    read it), reference_agree (how many read it as this run does: reference_reads) and
    reference_readings (how many different readings they gave: 1 where they agreed); where
    the spread holds the reference runs' pooled speedup, reference_speedup, reference_low and
    reference_high (its interval) and reference_agrees (whether this run agrees with it: the
    verdict then reads it; intervals.with_reference)."""
    rows = []
    for comparison, run, outcome in outcomes(metrics, comparisons, confidence, spread):
        described = {
            "optimisation": comparison.optimisation,
            "claim": ", ".join(comparison.claims),
            "compared": comparison.compared,
            "run": run,
        }
        text = verdict(comparison, outcome, threshold)
        parts = [(ALL_SHAPES, outcome, text)]
        for shape, shaped in outcome.by_shape.items():
            one = per_shape(outcome, shaped)
            shaped_text = single_verdict(comparison, one, threshold)
            parts.append((shape, shaped, text if outcome.unverified else shaped_text))
        pairs = (spread or {}).get(run, {})
        for shape, measured, text in parts:
            rows.append(
                described
                | {"shape": shape}
                | _numbers(measured, pairs, threshold)
                | {"verdict": text, "category": verdict_category(text)}
            )
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS).astype(
        {
            "speedup": float,
            "low": float,
            "high": float,
            "processes": "Int64",
            "se_log": float,
            "welch_df": float,
            "run_sd_log": float,
            "memory_ratio": float,
            "reference_runs": "Int64",
            "reference_agree": "Int64",
            "reference_readings": "Int64",
            "reference_speedup": float,
            "reference_low": float,
            "reference_high": float,
            "reference_agrees": "boolean",
        }
    )


def _verify_cell(row) -> str:
    if row["status"] != "ok":
        return f"{row['status']}: {row['reason']}"
    errors = [v for k, v in row.items() if str(k).startswith("max_rel_error.") and pd.notna(v)]
    worst = max(errors) if errors else float("nan")
    result = "pass" if row.get("passed") == 1 else "FAIL"
    return f"{result} {worst:.1e} (tol {row.get('tolerance', float('nan')):.0e})"


def verification_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """(variant, dtype, device) x run: pass/FAIL, worst relative error, tolerance, or why not."""
    verify = wide.verification(metrics)
    if verify.empty:
        return pd.DataFrame(columns=["variant", "dtype", "device"])
    verify = verify.assign(result=[_verify_cell(row) for _, row in verify.iterrows()])
    table = verify.pivot_table(
        index=["variant", "dtype", "device"], columns="run", values="result", aggfunc="first"
    )
    table.columns.name = None
    return table.reset_index().fillna(NONE)


def _number(value, fmt: str) -> str:
    return NONE if pd.isna(value) else format(value, fmt)


def _described(r) -> dict:
    """The leading columns of a per-record table: which measurement the row is."""
    return {
        "run": r["run"],
        "variant": r["variant"],
        "dtype": r["dtype"],
        "device": r["device"],
        "shape": wide.shape_text(r),
        "phase": r["phase"],
    }


def _status(r) -> str:
    return r["status"] if r["status"] == "ok" else f"{r['status']}: {r['reason']}"


def _peak_percent(r) -> str:
    """% of the host's GEMM ceiling; above 100% the ceiling itself is wrong (a kernel beat the
    best GEMM measured), and the cell says so instead of pretending."""
    fraction = r["peak_fraction"]
    text = _number(100 * fraction, ".1f")
    if pd.notna(fraction) and fraction > 1:
        text += " (ceiling wrong: this beat the best GEMM measured)"
    return text


def timer_warnings(metrics: pd.DataFrame) -> dict[tuple, str]:
    """(run, shape text, threads) -> warning, for every timer check that disagreed there."""
    checks = wide.records(metrics, "timer-check")
    warnings = {}
    for _, r in checks.iterrows():
        if r["status"] == "ok" and r.get("agrees") == 0 and pd.notna(r.get("ratio")):
            key = (r["run"], wide.shape_text(r), r["threads"])
            warnings[key] = (
                f"timer check disagrees here: ours / torch.utils.benchmark {r.get('ratio'):.2f}"
            )
    return warnings


def variants_numbers(metrics: pd.DataFrame) -> pd.DataFrame:
    """Every profiled job (its processes combined, rnnopt.report.wide.collapse_processes), as
    numbers: time_ms (geometric mean of the process medians), the lowest and highest process
    median, the median in-process IQR, tokens/s, GFLOP/s, fraction of the host's GEMM ceiling,
    arithmetic intensity and the roof that binds the row with the share of it reached
    (rnnopt.report.roofline), compile time, GEMM / elementwise split, CUDA kernels, noisy,
    verified, and a warning where the timer cross-check disagreed at that shape."""
    profile = wide.records(metrics, "profile")
    failed = wide.failed_verification(metrics)
    warnings = timer_warnings(metrics)
    placed = roofline_points(profile, wide.records(metrics, "peak"))
    rows = []
    for index, r in profile.iterrows():
        medians = [m for m in r["process_medians"] if pd.notna(m)]
        roof = placed.loc[index] if index in placed.index else {}
        rows.append(
            {
                **_described(r),
                "threads": r["threads"],
                "status": r["status"],
                "reason": r["reason"],
                "processes": r["processes"],
                "processes_left_out": r["disturbed"],
                "time_ms": r.get("time_ms.median"),
                "time_ms_lowest_process": min(medians) if medians else None,
                "time_ms_highest_process": max(medians) if medians else None,
                "time_ms_iqr": r.get("time_ms.iqr"),
                "tokens_per_s": r.get("tokens_per_s"),
                "gflops": r.get("gflops"),
                "peak_fraction": r.get("peak_fraction"),
                "intensity": roof.get("intensity"),
                "bound_by": roof.get("bound_by"),
                "roof_fraction": roof.get("roof_fraction"),
                "compile_s": r.get("compile_s"),
                "gemm_ms": r.get("split.gemm_ms"),
                "elementwise_ms": r.get("split.elementwise_ms"),
                "barrier_ms": r.get("split.barrier_ms"),
                "cuda_kernel_launches": r.get("cuda_kernel_launches"),
                "cudnn_persistent": r.get("cudnn_persistent"),
                "noisy": r.get("noisy") == 1,
                "verified": (r["run"], r["variant"], r["dtype"], r["device"]) not in failed,
                "warning": warnings.get((r["run"], wide.shape_text(r), r["threads"]), ""),
            }
        )
    columns = ["run", "variant", "dtype", "device", "shape", "phase", "threads"]
    table = pd.DataFrame(rows)
    return table.sort_values(columns, kind="stable").reset_index(drop=True) if rows else table


def variants_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """variants_numbers as the page shows it."""
    numbers = variants_numbers(metrics)
    rows = [
        {
            **{k: r[k] for k in ("run", "variant", "dtype", "device", "shape", "phase")},
            "threads": r["threads"],
            "status": _status(r),
            "time ms (process range)": _time(r),
            "tokens/s": _number(r["tokens_per_s"], ",.0f"),
            "GFLOP/s": _number(r["gflops"], ".2f"),
            "% of peak": _peak_percent(r),
            "FLOP/byte": _number(r["intensity"], ".3g"),
            "bound by": bound_text(r["bound_by"], r["roof_fraction"]),
            "compile s": _number(r["compile_s"], ".1f"),
            "GEMM ms / elementwise ms (/ barrier ms)": _split(r),
            "CUDA kernels (step)": _cuda_kernels(r),
            "noisy": "noisy" if r["noisy"] else "",
            "verified": "" if r["verified"] else "FAILED",
            "warning": r["warning"],
        }
        for _, r in numbers.iterrows()
    ]
    return pd.DataFrame(rows)


def _split(r) -> str:
    """GEMM-only time and the rest (rnnopt.measure.split), for runners that measure it; the
    barrier wait third where the runner's threads meet every step."""
    if pd.isna(r["gemm_ms"]):
        return NONE
    text = f"{r['gemm_ms']:.3g} / {r['elementwise_ms']:.3g}"
    return text if pd.isna(r.get("barrier_ms")) else f"{text} / {r['barrier_ms']:.3g}"


def _cuda_kernels(r) -> str:
    """Kernels one CUDA step launched (rnnopt.measure.cuda_kernels) and, for the library layer,
    which cuDNN RNN algorithm those kernels name."""
    if pd.isna(r["cuda_kernel_launches"]):
        return NONE
    text = f"{r['cuda_kernel_launches']:.0f} launches"
    if r["variant"].endswith("-nn"):
        text += ", persistent RNN" if r["cudnn_persistent"] == 1 else ", standard RNN"
    return text


def _time(r) -> str:
    """'1.23 (1.20-1.31, 3 processes)': the geometric mean of the process medians and the
    lowest and highest of them (and how many processes a slow spell of the host disturbed:
    left out, rnnopt.report.wide.undisturbed); one process: its median and its IQR."""
    if pd.isna(r["time_ms"]):
        return NONE
    if r["processes"] > 1:
        low, high = r["time_ms_lowest_process"], r["time_ms_highest_process"]
        left_out = (
            f"; {r['processes_left_out']} slow spell left out" if r["processes_left_out"] else ""
        )
        return f"{r['time_ms']:.3g} ({low:.3g}-{high:.3g}, {r['processes']} processes{left_out})"
    return f"{r['time_ms']:.3g} (IQR {r['time_ms_iqr']:.2g})"


TIMER_METRICS = ("time_ms.median", "blocked_median_ms", "ratio", "ratio_per_call", "tail", "agrees")
PEAK_PREFIXES = ("gemm_gflops.", "theoretical_gflops.float", "bandwidth_gbs.")


def checks_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """GEMM ceilings (and the theoretical FMA peak beside them) and the timer cross-check, per
    run, thread count and (timer check) shape."""
    rows = []
    for kind in ("peak", "timer-check"):
        frame = metrics[(metrics["kind"] == kind) & metrics["metric"].notna()]
        if kind == "peak":
            frame = frame[frame["metric"].str.startswith(PEAK_PREFIXES)]
        else:
            frame = frame[frame["metric"].isin(TIMER_METRICS)]
        for _, r in frame.iterrows():
            rows.append(
                {
                    "run": r["run"],
                    "check": kind,
                    "threads": r["threads"],
                    "shape": wide.shape_text(r) if pd.notna(r["batch"]) else NONE,
                    "metric": r["metric"],
                    "value": _number(r["value"], ".3g"),
                }
            )
        for _, r in metrics[(metrics["kind"] == kind) & (metrics["status"] != "ok")].iterrows():
            rows.append(
                {
                    "run": r["run"],
                    "check": kind,
                    "threads": r["threads"],
                    "shape": wide.shape_text(r) if pd.notna(r["batch"]) else NONE,
                    "metric": r["status"],
                    "value": r["reason"],
                }
            )
    return pd.DataFrame(rows, columns=["run", "check", "threads", "shape", "metric", "value"])


def memory_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """Every memory record: the headline peak (one instrument), what the runner keeps, the
    libraries' one-time buffers (paid by the warm-up runner), the analytic minimum and the
    ratio, and where the rest goes when the peak is above 1.5x the minimum."""
    memory = wide.records(metrics, "memory")
    rows = []
    for _, r in memory.iterrows():
        rows.append(
            {
                **_described(r),
                "status": _status(r),
                "instrument": r.get("peak_source") or NONE,
                "peak MiB": _number(r.get("peak_mib"), ".2f"),
                "kept MiB": _number(r.get("kept_mib"), ".2f"),
                "library buffers MiB": _number(r.get("heap.library_buffers_mib"), ".1f"),
                "minimum MiB": _number(r.get("minimum_mib"), ".2f"),
                "peak / minimum": _number(r.get("peak_over_minimum"), ".2f"),
                "numpy buffers/step": _number(r.get("tracemalloc.numpy_blocks_per_step"), ".1f"),
                "where the rest goes": r.get("explanation") or "",
            }
        )
    columns = ["run", "variant", "dtype", "device", "shape", "phase"]
    table = pd.DataFrame(rows)
    return table.sort_values(columns, kind="stable").reset_index(drop=True) if rows else table
