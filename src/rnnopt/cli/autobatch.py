"""`rnnopt autobatch`: the batch size with the highest tokens/s whose peak memory fits a budget.

Searches over measured points (rnnopt.experiments.autobatch: doubling, then probes guided by
a linear memory model and midpoints). Each point, in this process, one batch after another: tokens/s
= B*T / median by the timing protocol (rnnopt.measure.timing.benchmark) on a runner of the
phase, then the peak by the headline memory instrument (rnnopt.measure.heap.step_peak: memray on
CPU, torch.cuda on a GPU; a fresh variant and runner, apart from the timing). One record: every
point tried,
the linear fit peak ~ a + b*B, the pick. A budget below the peak of B=1 is a record with
status skipped and a one-line reason.
"""

from __future__ import annotations

import argparse

from rnnopt.cli.common import (
    add_timing_arguments,
    apply_variant_threads,
    check_variant_name,
    config_of,
    positive_float,
    positive_int,
    unbuilt_variant,
)
from rnnopt.experiments import autobatch
from rnnopt.experiments.autobatch import NothingFits, Point
from rnnopt.measure.harness import VariantFailed, guard_calls, guarded, make_inputs, phase_call
from rnnopt.measure.heap import step_peak
from rnnopt.measure.profile import timing_budget
from rnnopt.measure.timing import benchmark
from rnnopt.models.flops import PHASES, Shape
from rnnopt.models.variants import get_variant
from rnnopt.models.variants.base import DEVICES, DTYPES
from rnnopt.records import failure_of, make_record, status_of, write_record


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "autobatch",
        help="largest-throughput batch size under a memory budget, by measured points",
        description=__doc__,
    )
    parser.add_argument("--variant", required=True, help="variant name (rnnopt.list_variants)")
    parser.add_argument("--dtype", default="float32", choices=DTYPES)
    parser.add_argument("--device", default="cpu", choices=DEVICES)
    parser.add_argument("--seq-len", type=positive_int, required=True, metavar="T")
    parser.add_argument("--input-size", type=positive_int, required=True, metavar="I")
    parser.add_argument("--hidden-size", type=positive_int, required=True, metavar="H")
    parser.add_argument("--phase", choices=PHASES, default="step")
    parser.add_argument("--threads", type=positive_int, required=True, metavar="N")
    parser.add_argument("--budget-mib", type=positive_float, required=True, metavar="MIB")
    parser.add_argument("--max-batch", type=positive_int, default=1024, metavar="B")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, metavar="FILE.json", help="record to write")
    add_timing_arguments(parser)
    parser.set_defaults(func=run)


class Measurer:
    """measure(batch) -> Point: tokens/s by the timing protocol, then the heap peak."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.variant = guarded(get_variant, args.variant, dtype=args.dtype, device=args.device)
        self.instruments: set[str] = set()

    def shape(self, batch: int) -> Shape:
        return Shape(batch, self.args.seq_len, self.args.input_size, self.args.hidden_size)

    def __call__(self, batch: int) -> Point:
        args, shape = self.args, self.shape(batch)
        try:
            tokens_per_s = self._tokens_per_s(shape)
            heap = guarded(step_peak, args.variant, args.dtype, args.device, shape, args.phase,
                           args.seed)  # fmt: skip
        except VariantFailed as failure:
            if status_of(failure.error) != "oom":
                raise
            return Point(batch, None, None, status="oom")
        self.instruments.add(heap["instrument"])
        print(f"  B={batch}: {tokens_per_s:.0f} tokens/s, peak {heap['peak_mib']:.2f} MiB")
        return Point(batch, tokens_per_s, heap["peak_mib"])

    def _tokens_per_s(self, shape: Shape) -> float:
        args = self.args
        try:
            params, x, grad_y = make_inputs(self.variant.cell, shape, args.seed)
        except MemoryError as error:
            raise VariantFailed(error) from error
        runner = guarded(self.variant.runner, params, x, grad_y, 1e-3)
        call, before = guard_calls(*phase_call(runner, args.phase))
        metrics = benchmark(
            call,
            sync=guard_calls(runner.sync)[0],
            untimed_setup=before,
            device=runner.device,
            compiles=self.variant.compiles,
            **timing_budget(args),
        )
        return shape.tokens / (metrics["time_ms"]["median"] / 1e3)


def run(args) -> int:
    check_variant_name(args.variant)
    threads = apply_variant_threads(args)
    fields = unbuilt_variant(args)
    common = {"seed": args.seed, "config": config_of(args), "phase": args.phase,
              "threads": args.threads, "threads_effective": threads}  # fmt: skip
    measurer = None
    status, reason, shape, result = "ok", None, None, None
    try:
        measurer = Measurer(args)
        fields = {"variant": measurer.variant}
        result = autobatch.search(measurer, args.budget_mib, args.max_batch)
        if result.pick is not None:
            shape = measurer.shape(result.pick.batch).as_dict()
        else:
            status, reason = "failed", result.message
    except NothingFits as nothing:
        status, reason, result = "skipped", str(nothing), nothing.search
    except VariantFailed as failure:
        status, reason = failure_of(failure.error)  # a failure's traceback goes to the log
    notes = []
    if measurer is not None and measurer.instruments:
        notes.append(
            f"peak_mib by rnnopt.measure.heap.step_peak ({', '.join(sorted(measurer.instruments))})"
        )
    record = make_record(
        "autobatch",
        status=status,
        reason=reason,
        metrics=autobatch.summary(result) if result is not None else {},
        series=autobatch.series(result) if result is not None else {},
        notes=notes,
        shape=shape,
        **common,
        **fields,
    )
    write_record(args.out, record)
    if status != "ok":
        print(f"rnnopt autobatch: {status}: {reason}")
        return 0
    fit = result.fit or {}
    print(
        f"rnnopt autobatch: {args.variant} {args.dtype} {args.phase}: pick B={result.pick.batch} "
        f"({result.pick.tokens_per_s:.0f} tokens/s, {result.pick.peak_mib:.2f} MiB of "
        f"{args.budget_mib:g} MiB); largest fitting B={result.max_fitting_batch}; "
        f"fit peak = {fit.get('intercept_mib', float('nan')):.3f} + "
        f"{fit.get('slope_mib_per_batch', float('nan')):.4f} * B MiB, "
        f"R^2 {fit.get('r2', float('nan')):.4f}; {len(result.points)} points"
    )
    return 0
