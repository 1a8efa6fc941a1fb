"""`rnnopt peak`: the measured GEMM ceiling (GFLOP/s) per library and dtype, one record.

Cases: numpy float64/float32, torch CPU float64/float32/bfloat16, and torch CUDA
float64/float32/tfloat32/float16/bfloat16 when a GPU is present, each in every operand layout
(rnnopt.measure.peak.LAYOUTS) at the first --size and in the best of them at the others, keeping its
best. A case that cannot run here is left out with a note; the record is `ok` if any case
ran. Beside them, the CPU's theoretical FMA peak where it is known
(rnnopt.measure.peak.theoretical_gflops), and the bandwidth of each memory level at --threads
(rnnopt.measure.bandwidth: read, write, copy, triad on L1d, L2, L3 and DRAM working sets; the
GPU's device memory where there is one): the roofline's slanted roofs.
"""

from __future__ import annotations

from rnnopt.cli.common import positive_float, positive_int
from rnnopt.measure import bandwidth
from rnnopt.measure.caches import cache_sizes
from rnnopt.measure.peak import CPU_CASES, CUDA_CASES, LAYOUTS, measure_gemm, theoretical_gflops
from rnnopt.measure.threads import apply_threads, threads_match
from rnnopt.models.variants import cuda_available
from rnnopt.records import make_record, write_record


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "peak",
        help="measured GEMM ceiling per library and dtype, and bandwidth per memory level",
        description=__doc__,
    )
    parser.add_argument(
        "--threads", type=positive_int, required=True, metavar="N", help="GEMM threads"
    )
    parser.add_argument("--out", required=True, metavar="FILE.json", help="record to write")
    parser.add_argument(
        "--size",
        type=positive_int,
        nargs="+",
        default=[1024, 2048],
        help="N of the N x N GEMM; several: each case keeps its best (default 1024 2048)",
    )
    parser.add_argument(
        "--cuda-size", type=positive_int, default=8192, help="N on a GPU (1024 is launch-bound)"
    )
    parser.add_argument(
        "--dtypes",
        nargs="+",
        choices=sorted({dtype for _, dtype in CPU_CASES}),
        help="CPU dtypes to measure (default all; the workflow: those profiled at --threads)",
    )
    parser.add_argument(
        "--min-time-s", type=positive_float, default=0.5, help="timed seconds per case, at least"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the GEMM operands")
    parser.add_argument(
        "--bandwidth-min-time-s",
        type=positive_float,
        default=0.05,
        help="timed seconds per bandwidth case (level x kernel), at least",
    )
    parser.add_argument(
        "--no-bandwidth",
        action="store_true",
        help="measure the GEMM ceilings only, not the bandwidth per memory level",
    )
    parser.set_defaults(func=run)


def run(args) -> int:
    threads = apply_threads(args.threads)
    cpu_cases = [case for case in CPU_CASES if args.dtypes is None or case[1] in args.dtypes]
    cases = [(case, size) for case in cpu_cases for size in args.size]
    notes = []
    if cuda_available():
        cases += [(case, args.cuda_size) for case in CUDA_CASES]
    else:
        notes.append("no CUDA device: CPU cases only")
    best: dict[tuple[str, str], dict] = {}  # (library, dtype) -> its fastest GEMM so far
    failed: set = set()
    slow: set = set()
    for (library, dtype), size in cases:
        # Every layout at a case's first size, where products are cheapest; larger sizes in
        # the best layout found so far only (the layout decides more than the size does).
        chosen = best.get((library, dtype), {}).get("layout")
        for layout in (chosen,) if chosen else LAYOUTS:
            case = (library, dtype, layout)
            if case in slow or (library, dtype, size) in failed:
                continue  # slow: timed by a single call at a smaller size; larger is slower
            try:
                result = measure_gemm(library, dtype, size, args.min_time_s, layout)
            except (RuntimeError, TypeError, ValueError, MemoryError) as error:
                failed.add((library, dtype, size))
                error_text = f"{type(error).__name__}: {error}"
                notes.append(f"{library} {dtype} N={size}: not measured ({error_text})")
                continue
            gflops = result["gflops"]
            print(f"rnnopt peak: {library} {dtype} N={size} {layout}: {gflops:.1f} GFLOP/s")
            if result["calls"] == 1:
                slow.add(case)
                notes.append(f"{library} {dtype} {layout}: slow here, one call at N={size}")
            if gflops > best.get((library, dtype), {}).get("gflops", 0.0):
                best[(library, dtype)] = result | {"size": size, "layout": layout}
    bandwidth = {} if args.no_bandwidth else measure_bandwidth(args, notes)
    if not threads_match(threads):
        notes.append("thread counts in force differ from --threads (see threads_effective)")
    status, reason = ("ok", None) if best else ("failed", "no GEMM case could run")
    record = make_record(
        "peak",
        seed=args.seed,
        config={k: v for k, v in vars(args).items() if k not in ("func", "command")},
        status=status,
        reason=reason,
        metrics={
            "gemm_gflops": _by_library(best, "gflops"),
            "gemm_time_ms": _by_library(best, "time_ms"),
            "gemm_size": _by_library(best, "size"),
            "gemm_layout": _by_library(best, "layout"),
            "theoretical_gflops": theoretical_gflops(args.threads),
            **bandwidth,
        },
        threads=args.threads,
        threads_effective=threads,
        notes=notes,
    )
    write_record(args.out, record)
    return 0


def _by_library(best: dict, key: str) -> dict:
    """{library: {dtype: value of `key`}} of the best GEMM of each (library, dtype)."""
    nested: dict = {}
    for (library, dtype), found in best.items():
        nested.setdefault(library, {})[dtype] = found[key]
    return nested


def measure_bandwidth(args, notes: list[str]) -> dict:
    """Metrics `bandwidth_gbs.<device>.<level>.<kernel>` and
    `bandwidth_working_set_bytes.<device>.<level>` (rnnopt.measure.bandwidth); a note for
    what could not be measured."""
    caches = cache_sizes()
    if not caches:
        notes.append("cache sizes unknown: bandwidth measured for DRAM only")
    gbs, sets = {}, {}
    try:
        cpu = bandwidth.measure_cpu(caches, args.threads, args.bandwidth_min_time_s)
        gbs["cpu"], sets["cpu"] = cpu["gbs"], cpu["working_set_bytes"]
        notes.append(f"bandwidth kernels: {cpu['kernel_compiler']}, STREAM byte counting")
    except (RuntimeError, ValueError, MemoryError) as error:
        notes.append(f"CPU bandwidth not measured ({type(error).__name__}: {error})")
    if cuda_available():
        try:
            cuda = bandwidth.measure_cuda()
            gbs["cuda"], sets["cuda"] = cuda["gbs"], cuda["working_set_bytes"]
        except (RuntimeError, MemoryError) as error:
            notes.append(f"GPU bandwidth not measured ({type(error).__name__}: {error})")
    if not gbs:
        return {}
    return {"bandwidth_gbs": gbs, "bandwidth_working_set_bytes": sets}
