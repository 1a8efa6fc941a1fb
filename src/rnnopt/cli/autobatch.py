"""`rnnopt autobatch`: the batch size with the highest tokens/s whose peak memory fits a budget.

Searches over measured points (rnnopt.experiments.autobatch: doubling, then probes guided by
a linear memory model and midpoints). Each point, in this process, one batch after another:
tokens/s = B*T / the 10th-percentile call of the timing protocol (rnnopt.measure.timing) on a
runner of the phase, then the peak by the headline memory instrument (rnnopt.measure.heap.
step_peak: memray on CPU, torch.cuda on a GPU; a fresh variant and runner, apart from the
timing). Then the largest fitting batch and the fastest other fitting point are timed again
in --confirm-rounds rounds, one timing of each a round (with --spell-log, each round after a
wait for a slow spell to pass), and rounds in a slow spell of the host are replaced; the pick
is the better of the two (rnnopt.experiments.autobatch.confirm). One record: every point
tried, the rounds, the linear fit peak ~ a + b*B and the pick. A budget below the peak of B=1
is a record with status skipped and a one-line reason.
"""

from __future__ import annotations

from rnnopt.cli.common import (
    add_seed_argument,
    add_shape_arguments,
    add_spell_arguments,
    add_threads_argument,
    add_timing_arguments,
    add_variant_arguments,
    apply_variant_threads,
    check_variant_name,
    config_of,
    positive_float,
    positive_int,
    unbuilt_variant,
)
from rnnopt.experiments import autobatch
from rnnopt.experiments.autobatch import Measurer, NothingFits
from rnnopt.measure.harness import VariantFailed
from rnnopt.models.flops import PHASES
from rnnopt.records import failure_of, make_record, write_record


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "autobatch",
        help="largest-throughput batch size under a memory budget, by measured points",
        description=__doc__,
    )
    add_variant_arguments(parser)
    add_shape_arguments(parser, without=("batch",))  # the batch is what it searches
    parser.add_argument("--phase", choices=PHASES, default="step", help="the phase measured")
    add_threads_argument(parser)
    parser.add_argument(
        "--budget-mib",
        type=positive_float,
        required=True,
        metavar="MIB",
        help="the peak heap of one phase call must fit this, MiB",
    )
    parser.add_argument(
        "--max-batch", type=positive_int, default=1024, metavar="B", help="largest batch tried"
    )
    parser.add_argument(
        "--confirm-rounds",
        type=positive_int,
        default=5,
        metavar="N",
        help="rounds of timings of the two contenders for the pick (default 5)",
    )
    add_spell_arguments(parser)
    add_seed_argument(parser)
    parser.add_argument("--out", required=True, metavar="FILE.json", help="record to write")
    add_timing_arguments(parser)
    parser.set_defaults(func=run)


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
        result = autobatch.confirm(result, measurer.time_round, args.confirm_rounds)
        measurer.log_spells()
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
        f"R^2 {fit.get('r2', float('nan')):.4f}; {len(result.points)} points, "
        f"{len(result.rounds) // 2} confirmation rounds"
    )
    return 0
