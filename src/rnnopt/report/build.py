"""The report's pages: comparison, verification, variant and check tables (md, html, csv) and
figures.

`build(metrics, series, out)` writes out/comparison.md, out/comparison.html, out/tables/*.csv
and out/figures/*.png from the aggregate's tidy tables (rnnopt.report.aggregate).
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from rnnopt.report import (
    published,
    table,
)
from rnnopt.report.comparisons import COMPARISONS
from rnnopt.report.experiments import batching, memory, persistent, scan
from rnnopt.report.figures import FIGURES, draw_all
from rnnopt.report.intervals import CONFIDENCE, THRESHOLD
from rnnopt.report.verdicts import (
    GC_SHARE_MATTERS,
    LEARNED_RATIO,
    MEMORY_LOWER,
    SAME_LOSS,
    THROUGHPUT_GAIN,
)
from rnnopt.report.wide import runs

TABLES = ("comparison", "verification", "variants", "memory", "checks")


def between_runs_note(metrics: pd.DataFrame, spread: dict | None) -> str:
    """Which runs' intervals carry their host's between-run spread, and over how many runs."""
    widened = {
        run: int(max(pair.run_df for pair in spread[run].values())) + 1
        for run in runs(metrics)
        if spread and spread.get(run)
    }
    if not widened:
        return (
            "No between-run spread is measured for these runs (verdicts.rerun_spread): their "
            "intervals hold the spread of one run's processes, and a run-level shift can move "
            "a verdict near the threshold on a rerun."
        )
    named = ", ".join(f"{run} (measured over {n} runs)" for run, n in widened.items())
    return (
        "The intervals of " + named + " also carry the host's between-run spread of each "
        "speedup (verdicts.rerun_spread; the run_sd_log column: "
        'its variance adds to the processes\', docs/intervals.md, "Between runs"). Where the '
        "spread file holds those runs' pooled speedup and this run's agrees with it (lies in "
        "the interval they predict for a run), the verdict reads the pooled interval, which "
        "many runs measure better than one: it names both, and a rerun that agrees reads the "
        'same verdict (the reference_* columns; docs/intervals.md, "Verdicts from the '
        'reference runs"). A run that differs is judged on its own and says so. Where a verdict '
        "rests on this run's interval and those runs did not all read the speedup the same "
        'way, it says how they read it ("a rerun may read otherwise": the verdict sits near '
        'the threshold, docs/intervals.md, "Verdicts near the threshold").'
    )


def how_to_read(threshold: float, confidence: float) -> str:
    """The comparison table's reading note: the interval method and the verdict rules."""
    lower, upper = 1 / (1 + threshold), 1 + threshold
    return (
        "Speedup: baseline time / candidate time, from profile records of both at the same "
        "shape, phase and thread count, at the anchor (step phase, fewest threads). Each "
        "configuration is timed in several independent processes (timing.repeats, run in "
        "passes; a verdict they leave inconclusive gets more, timing.topup_*: the processes "
        "column of tables/comparison.csv), each summarised by the 2nd percentile of its "
        "calls; the speedup is the ratio of the two sides' geometric means of those process "
        f"times, in brackets its {confidence:.0%} confidence interval (Welch's t on their "
        "logs: the spread between processes, which is what the next run differs by; "
        "docs/intervals.md). Over several "
        "shapes: the geometric mean and the union of the intervals. A speed verdict needs an "
        f"interval: faster when the whole interval lies above {upper:.2f}x (threshold "
        f"{threshold:.0%}), slower when below {lower:.2f}x, no meaningful difference when "
        f"inside {lower:.2f}-{upper:.2f}x (the claim fails), inconclusive otherwise; with one "
        "process a side there is no interval and the row is not judged. A process timed in a "
        "slow spell of the host (its speed probes) is left out while two of its job remain; "
        "where it had to stay, a finding it could have made (a spell only slows: slower with a "
        "slowed candidate, faster with a slowed baseline) is inconclusive. Peak memory: candidate "
        "/ baseline peak_mib of memory records, exact (memray's allocator-level peaks are "
        "byte-equal from run to run), so it carries no interval. Loss: relative change of the "
        "final held-out loss (a split of the dataset never trained on), same initial weights "
        "and batches, same number of steps; the training rows show each run's held-out loss "
        "and its share of the predict-the-mean baseline. Verdict: supported when every "
        f"criterion of the row holds (speed: faster as above; memory: below {MEMORY_LOWER}x; "
        f"loss: within {SAME_LOSS:.0%}; GC: over {GC_SHARE_MATTERS:.0%} of the baseline's time; "
        f"batch size: the best's tokens/s at least {THROUGHPUT_GAIN}x the smallest's over the "
        "whole interval of their processes (train.experiments.repeats; one process a run: the "
        "ratio alone); learned: every "
        f"compared run's held-out loss at most {LEARNED_RATIO:.0%} of the predict-the-mean "
        "baseline; clipping: clip-off diverges and clip-on ends below that baseline); not "
        "supported when one fails; inconclusive when none fails and one cannot decide; not "
        "measured here, with the reason, when the records are missing, skipped, failed, or a "
        "compared variant failed verification. tables/comparison.csv holds the numbers, one "
        "row per comparison, run and shape."
    )


@dataclass
class Section:
    title: str
    text: str
    frame: pd.DataFrame | None = None


def runs_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """One row per run: where it ran, what with, how many records of which status."""
    records = metrics.drop_duplicates("source")
    rows = []
    for run, group in records.groupby("run"):
        first = group.iloc[0]
        statuses = group["status"].value_counts()
        rows.append(
            {
                "run": run,
                "host": first["host"],
                "cpu": first["cpu_model"],
                "gpu": first["gpu"] if pd.notna(first["gpu"]) else table.NONE,
                "image": first["image"] if pd.notna(first["image"]) else table.NONE,
                "git commit": str(first["git_commit"])[:12],
                "records": ", ".join(f"{n} {status}" for status, n in statuses.items()),
            }
        )
    return pd.DataFrame(rows)


def sections(
    metrics: pd.DataFrame,
    tables: dict[str, pd.DataFrame],
    threshold: float = THRESHOLD,
    confidence: float = CONFIDENCE,
    spread: dict | None = None,
) -> list[Section]:
    notes = "; ".join(f"{c.optimisation}: {c.about}" for c in COMPARISONS if c.about)
    return [
        Section(
            "Runs",
            "Each run is one host or container; its columns sit side by side.",
            runs_table(metrics),
        ),
        Section(
            "Optimisation comparison",
            f"{how_to_read(threshold, confidence)} {between_runs_note(metrics, spread)} "
            f"Rows: {notes}.",
            tables["comparison"],
        ),
        Section(
            "Verification",
            "Each variant, dtype and device against the float64 reference "
            "(outputs and every gradient): worst relative error and tolerance. A variant "
            "that fails is flagged in every table and gets no verdict.",
            tables["verification"],
        ),
        Section(
            "Variants",
            "Every profiled configuration: time per call (the geometric mean of its "
            "processes' medians, and the lowest and highest of them), throughput, achieved "
            "GFLOP/s and its fraction of the measured GEMM peak; noisy when a process's "
            "IQR / median > 10% (the median over processes). tables/variants.csv holds the "
            "numbers.",
            tables["variants"],
        ),
        Section(
            "Memory",
            "Every memory record. Peak: the heap bytes of a fresh runner built and called "
            "once, above the heap before it, at the allocator level by one instrument for "
            "every framework (memray on CPU, torch.cuda on a GPU), after a warm-up runner paid "
            "the libraries' one-time buffers (shown apart); kept: what the runner holds "
            "between steps; minimum: the analytic BPTT floor (activations, outputs, "
            "gradients). Only this peak enters the comparison's memory ratios. tracemalloc "
            "(numpy buffers per time step) and the RSS timeline are secondary instruments.",
            tables["memory"],
        ),
        Section(
            "Measurement checks",
            "GEMM ceilings (GFLOP/s per library and dtype; the best library of a dtype is the "
            "host's ceiling that '% of peak' divides by), the theoretical FMA peak at the "
            "nominal clock beside them (a boosting core can exceed it), and the timer "
            "cross-check per shape: ratio = our median of blocks of Timer's size / "
            "torch.utils.benchmark's blocked median (agrees within 10%); ratio_per_call uses "
            "our per-call median, tail = our mean / median.",
            tables["checks"],
        ),
        Section("GPU against published figures", published.ABOUT, tables["published"]),
        Section("Batching experiments", batching.about(threshold), tables["batching"]),
        Section("New architectures: parallel scan", scan.ABOUT, tables["scan"]),
        Section("New architectures: training", scan.TRAINING_ABOUT, tables["scan_training"]),
        Section(
            "Persistent weights",
            " ".join(filter(None, (persistent.ABOUT, persistent.best_rung(metrics)))),
            tables["persistent"],
        ),
        Section(
            "Cache, GC and precision experiments",
            memory.ABOUT,
            tables["cache_gc_precision"],
        ),
        Section("Figures", ""),
    ]


def markdown_cell(value):
    """A table cell's text that cannot break the markdown table or inject HTML: record strings
    (a failure's reason, a variant's note) come from anywhere."""
    if not isinstance(value, str):
        return value
    text = " ".join(value.split())  # newlines end a table row
    return text.replace("<", "&lt;").replace("|", "\\|")  # "<" opens a tag; ">" is harmless


def markdown(parts: list[Section], figures: dict[str, str]) -> str:
    lines = ["# rnnopt: which RNN/LSTM optimisations pay", ""]
    for part in parts:
        lines += [f"## {part.title}", ""]
        if part.text:
            lines += [part.text, ""]
        if part.frame is not None:
            frame = part.frame.map(markdown_cell).rename(columns=markdown_cell)
            lines += [frame.to_markdown(index=False) if len(frame) else "(none)", ""]
    for name, why in figures.items():
        lines += [f"![{name}](figures/{name}.png)" + (f" (not drawn: {why})" if why else ""), ""]
    return "\n".join(lines)


STYLE = (
    "body{font-family:sans-serif;margin:1.5em;} table{border-collapse:collapse;font-size:12px;}"
    "td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top;} th{background:#eee;}"
    "img{max-width:100%;margin:1em 0;}"
)


def html_page(parts: list[Section], figures: dict[str, str]) -> str:
    body = ["<h1>rnnopt: which RNN/LSTM optimisations pay</h1>"]
    for part in parts:
        body.append(f"<h2>{html.escape(part.title)}</h2>")
        if part.text:
            body.append(f"<p>{html.escape(part.text)}</p>")
        if part.frame is not None:
            body.append(
                part.frame.to_html(index=False, border=0) if len(part.frame) else "<p>(none)</p>"
            )
    for name, why in figures.items():
        body.append(
            f'<figure><img src="figures/{name}.png" alt="{name}">'
            + (f"<figcaption>not drawn: {html.escape(why)}</figcaption>" if why else "")
            + "</figure>"
        )
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>rnnopt comparison</title>"
        f"<style>{STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def build(
    metrics: pd.DataFrame,
    series: pd.DataFrame,
    out: str | Path,
    threshold: float = THRESHOLD,
    confidence: float = CONFIDENCE,
    spread: dict | None = None,
) -> dict[str, Path]:
    """Write every table and figure under `out`; returns name -> path. The CSVs hold numbers
    (comparison, variants: rnnopt.report.table's *_numbers); the pages show them as text."""
    out = Path(out)
    (out / "tables").mkdir(parents=True, exist_ok=True)
    tables = {
        "comparison": table.comparison_table(
            metrics, threshold=threshold, confidence=confidence, spread=spread
        ),
        "verification": table.verification_table(metrics),
        "variants": table.variants_table(metrics),
        "memory": table.memory_table(metrics),
        "checks": table.checks_table(metrics),
        "published": published.table(metrics),
        "batching": batching.table(metrics, series, threshold),
        "scan": scan.table(metrics),
        "scan_training": scan.training_table(metrics),
        "persistent": persistent.table(metrics, spread),
    }
    tables["cache_gc_precision"] = memory.table(metrics, spread)
    tables.update(memory.point_tables(metrics))
    numbers = {
        "comparison": table.comparison_numbers(
            metrics, threshold=threshold, confidence=confidence, spread=spread
        ),
        "variants": table.variants_numbers(metrics),
        "persistent": persistent.numbers(metrics, spread),
    }
    paths = {}
    for name, frame in tables.items():
        paths[name] = out / "tables" / f"{name}.csv"
        numbers.get(name, frame).to_csv(paths[name], index=False)
    figures = draw_all(metrics, series, out / "figures")
    figures.update(memory.draw(metrics, series, out / "figures"))
    paths.update({name: out / "figures" / f"{name}.png" for name in memory.FIGURES})
    figures.update(batching.draw(metrics, series, out / "figures"))
    figures.update(scan.draw(metrics, out / "figures"))
    drawn = (*FIGURES, *batching.FIGURES, *scan.FIGURES)
    paths.update({name: out / "figures" / f"{name}.png" for name in drawn})
    parts = sections(metrics, tables, threshold, confidence, spread)
    paths["markdown"] = out / "comparison.md"
    paths["markdown"].write_text(markdown(parts, figures))
    paths["html"] = out / "comparison.html"
    paths["html"].write_text(html_page(parts, figures))
    return paths
