"""The workflow config: checked against its schema in one line per problem, and expanded.

`check` is what the Snakefile runs before any job: the first problem becomes a UserError that
names the key (`profile[0].shapes[0].batch: 'x' is not ...`), so a bad config stops with one
line instead of a dump of the schema. The `*_jobs` functions expand the config's entries (cross
products of lists, variant patterns, shape sweeps, "all" threads) into one dict per job; the
rule files format those into output paths.
"""

from __future__ import annotations

import copy
import fnmatch
import itertools
import math
import os
from pathlib import Path

import jsonschema
import yaml
from jsonschema.exceptions import best_match

from rnnopt.errors import UserError
from rnnopt.models.flops import SHAPE_KEYS
from rnnopt.models.variants import list_variants

SCHEMA_PATH = Path(__file__).resolve().parents[1] / "schemas" / "config.schema.yaml"
MEASURE_KEYS = ("variant", "dtype", "device", *SHAPE_KEYS, "phase", "threads")


def load_schema(path: str | os.PathLike = SCHEMA_PATH) -> dict:
    return yaml.safe_load(Path(path).read_text())


def _key(path) -> str:
    key = ""
    for part in path:
        key += f"[{part}]" if isinstance(part, int) else f".{part}"
    return key.lstrip(".") or "(top level)"


def _message(error: jsonschema.ValidationError) -> str:
    """One line naming the key and what is allowed there."""
    key = _key(error.absolute_path)
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - set(allowed))[0]
        where = f" under {key}" if error.absolute_path else ""
        return f"unknown key {unknown!r}{where}; allowed: {', '.join(allowed)}"
    if error.validator in ("anyOf", "oneOf", "not") and error.schema.get("description"):
        description = " ".join(error.schema["description"].split())
        return f"{key}: {error.instance!r} is not allowed ({description})"
    return f"{key}: {error.message}"


# JSON Schema counts 4.0 as an integer; a size of 4.0 then broke the DAG (`b4.0-...` paths that
# no rule makes). Here an integer is a YAML integer.
Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _, value: isinstance(value, int) and not isinstance(value, bool)
    ),
)


def _with_defaults(validator_class):
    """A validator that fills `default`s in place while it validates (jsonschema's FAQ recipe)."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if "default" in subschema:
                    instance.setdefault(name, copy.deepcopy(subschema["default"]))
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


def check(config: dict, schema: dict | None = None) -> dict:
    """A copy of `config` with defaults filled in; UserError naming the first bad key."""
    schema = load_schema() if schema is None else schema
    error = best_match(Validator(schema).iter_errors(config))
    if error is not None:
        raise UserError(_message(error))
    filled = copy.deepcopy(config)
    _with_defaults(Validator)(schema).validate(filled)
    _check_finite(filled)
    _check_semantics(filled)
    return filled


def _check_finite(value, key: str = "") -> None:
    """Every number finite: `min_time_s: .inf` passed the schema and hung every profile job,
    `lr: .nan` stopped the run later."""
    if isinstance(value, dict):
        for name, item in value.items():
            _check_finite(item, f"{key}.{name}" if key else str(name))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_finite(item, f"{key}[{index}]")
    elif isinstance(value, float) and not math.isfinite(value):
        raise UserError(f"{key}: {value} is not a finite number")


def _check_semantics(config: dict) -> None:
    """What the schema cannot say: names that must exist, sizes that must divide."""
    for key, patterns in _variant_lists(config):
        for index, pattern in enumerate(patterns):
            if not fnmatch.filter(list_variants(), pattern):
                raise UserError(
                    f"{key}[{index}]: {pattern!r} matches no variant; available: "
                    + ", ".join(list_variants())
                )
    tasks = config["datasets"]["tasks"]
    train = config["train"]
    for index, entry in enumerate(train["runs"]):
        for task in entry["tasks"]:
            if task not in tasks:
                raise UserError(
                    f"train.runs[{index}].tasks: {task!r} is not in datasets.tasks ({tasks})"
                )
    varlen = config["varlen"]
    if varlen["min_length"] > varlen["seq_len"]:
        raise UserError(
            f"varlen.min_length: {varlen['min_length']} exceeds "
            f"varlen.seq_len ({varlen['seq_len']})"
        )
    experiments = train["experiments"]
    if experiments["task"] not in tasks:
        raise UserError(
            f"train.experiments.task: {experiments['task']!r} is not in datasets.tasks ({tasks})"
        )
    accumulation = experiments["accumulation"]
    if accumulation["batch"] % accumulation["micro_batches"]:
        raise UserError(
            "train.experiments.accumulation.batch: "
            f"{accumulation['batch']} is not a multiple of micro_batches "
            f"({accumulation['micro_batches']})"
        )
    for key, name in (
        ("train.experiments.variant", experiments["variant"]),
        ("timer_check.variant", config["timer_check"]["variant"]),
        ("autobatch.variant", config["autobatch"]["variant"]),
        *((f"varlen.variants[{i}]", name) for i, name in enumerate(config["varlen"]["variants"])),
    ):
        if name not in list_variants():
            raise UserError(f"{key}: unknown variant {name!r}; available: {list_variants()}")


def _variant_lists(config: dict):
    for stage in ("verify", "profile", "memory", "churn"):
        for index, entry in enumerate(config[stage]):
            yield f"{stage}[{index}].variants", entry["variants"]
    yield "precision.variants", config["precision"]["variants"]
    for index, entry in enumerate(config["train"]["runs"]):
        yield f"train.runs[{index}].variants", entry["variants"]


class StrictLoader(yaml.SafeLoader):
    """YAML that refuses a key given twice in one mapping (PyYAML keeps the last silently)."""


def _strict_mapping(loader: StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            line = key_node.start_mark.line + 1
            raise UserError(f"key {key!r} given twice (lines {seen[key]} and {line})")
        seen[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _strict_mapping)


def _no_empty_mappings(value, key: str = "") -> None:
    """`profile: {}` in an overlay changed nothing (mappings merge key by key) and looked like
    it emptied the list: an empty mapping is refused, with what to write instead."""
    if isinstance(value, dict):
        if not value and key:
            raise UserError(
                f"{key}: {{}} changes nothing (mappings merge key by key); "
                f"to empty a list write {key.rsplit('.', 1)[-1]}: []"
            )
        for name, item in value.items():
            _no_empty_mappings(item, f"{key}.{name}" if key else str(name))


def read_file(path: str | os.PathLike) -> dict:
    """One config file, strictly: UTF-8, YAML without repeated keys or empty mappings; a
    UserError naming the file otherwise."""
    path = Path(path)
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=StrictLoader) or {}
    except UserError as error:
        raise UserError(f"{path}: {error}") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        detail = " ".join(str(error).split())
        raise UserError(f"{path}: not a readable YAML config ({detail})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: not a mapping of config keys")
    try:
        _no_empty_mappings(data)
    except UserError as error:
        raise UserError(f"{path}: {error}") from None
    return data


def load(path: str | os.PathLike, *overlays: str | os.PathLike) -> dict:
    """The checked config of a file and overlays (as `--configfile` merges them)."""
    config: dict = {}
    for file in (path, *overlays):
        merge(config, read_file(file))
    return check(config)


def merge(base: dict, update: dict) -> None:
    """Snakemake's merge of config files: dicts merge key by key, anything else replaces."""
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            merge(base[key], value)
        else:
            base[key] = value


# ---------------------------------------------------------------- expansion into jobs


def matching_variants(patterns: list[str]) -> list[str]:
    """Registry names matched by any pattern, in registry order."""
    return [name for name in list_variants() if any(fnmatch.fnmatch(name, p) for p in patterns)]


def available_cores() -> int:
    return len(os.sched_getaffinity(0))


def resolve_threads(values: list, cores: int | None = None) -> list[int]:
    cores = cores or available_cores()
    return sorted({cores if value == "all" else int(value) for value in values})


# "l2" as a size: the largest multiple of L2_FIT_STEP whose float32 LSTM W_hh (4H x H), split
# over every core, is below one core's L2 (the persistent rung's small-batch shape, where each
# thread's slice of the weights can stay in its core's cache); L2_FIT_FALLBACK where the host
# does not report its L2.
L2_FIT_STEP, L2_FIT_FALLBACK = 128, 256


def l2_fit_size(cores: int, l2_bytes: int | None) -> int:
    if not l2_bytes:
        return L2_FIT_FALLBACK
    size = L2_FIT_STEP
    while 4 * (size + L2_FIT_STEP) ** 2 * 4 / cores < l2_bytes:
        size += L2_FIT_STEP
    return size


def expand_shape(shape: dict, cores: int | None = None) -> list[dict]:
    """{batch: [1, 4], seq_len: 20, ...} -> one dict per combination; "l2" sizes resolved for
    this host (l2_fit_size)."""
    from rnnopt.measure.host import cpu_caches

    def sizes(value) -> list[int]:
        if value == "l2":
            return [l2_fit_size(cores or available_cores(), cpu_caches().get("l2"))]
        return value if isinstance(value, list) else [value]

    axes = [sizes(shape[k]) for k in SHAPE_KEYS]
    return [dict(zip(SHAPE_KEYS, combo, strict=True)) for combo in itertools.product(*axes)]


def _unique(jobs) -> list[dict]:
    seen, unique = set(), []
    for job in jobs:
        key = tuple(sorted(job.items()))
        if key not in seen:
            seen.add(key)
            unique.append(job)
    return unique


def measure_jobs(entries: list[dict], cores: int | None = None) -> list[dict]:
    """One dict per (variant, dtype, device, shape, phase, threads) of profile/memory entries."""
    jobs = []
    for entry in entries:
        shapes = [s for spec in entry["shapes"] for s in expand_shape(spec, cores)]
        for variant, dtype, device, shape, phase, threads in itertools.product(
            matching_variants(entry["variants"]),
            entry["dtypes"],
            entry["devices"],
            shapes,
            entry["phases"],
            resolve_threads(entry["threads"], cores),
        ):
            jobs.append(
                dict(variant=variant, dtype=dtype, device=device, phase=phase, threads=threads)
                | shape
            )
    return _unique(jobs)


def profile_jobs(entries: list[dict], cores: int | None = None) -> list[dict]:
    """One dict per (variant, dtype, device, shape, threads): a profile job times all three
    phases in one process."""
    entries = [entry | {"phases": ["step"]} for entry in entries]
    return [{k: v for k, v in job.items() if k != "phase"} for job in measure_jobs(entries, cores)]


def profile_processes(config: dict, cores: int | None = None) -> list[dict]:
    """Every profile job once per process that times it: `process` 0 .. R-1, where R is the
    largest `repeats` of the entries that ask for the job (timing.repeats where unset)."""
    repeats: dict[tuple, int] = {}
    for entry in config["profile"]:
        wanted = entry.get("repeats") or config["timing"]["repeats"]
        for job in profile_jobs([entry], cores):
            key = tuple(job.items())
            repeats[key] = max(repeats.get(key, 0), wanted)
    return [dict(key) | {"process": p} for key, n in repeats.items() for p in range(n)]


def profile_min_calls(config: dict, cores: int | None = None) -> dict[tuple, int]:
    """Job (as a tuple of its items) -> timed calls at least, for the jobs of entries that set
    their own `min_calls`; the fewest where two entries ask for one job differently."""
    wanted: dict[tuple, int] = {}
    for entry in config["profile"]:
        if entry.get("min_calls") is None:
            continue
        for job in profile_jobs([entry], cores):
            key = tuple(job.items())
            wanted[key] = min(wanted.get(key, entry["min_calls"]), entry["min_calls"])
    return wanted


def native_only_jobs(entries: list[dict], cores: int | None = None) -> list[dict]:
    """The profile jobs of the entries marked native_only (rnnopt profile --native-only)."""
    return profile_jobs([entry for entry in entries if entry.get("native_only")], cores)


def timer_check_jobs(config: dict, cores: int | None = None) -> list[dict]:
    """One dict per timer_check shape and thread count: the counts that shape is profiled at
    (every profiled count for a shape no profile job measures), narrowed by the shape's own
    `threads` if it has them."""
    jobs = profile_jobs(config["profile"], cores)
    profiled = sorted({job["threads"] for job in jobs})
    checks = []
    for entry in config["timer_check"]["shapes"]:
        shape = {key: entry[key] for key in SHAPE_KEYS}
        at_shape = {job["threads"] for job in jobs if all(job[k] == v for k, v in shape.items())}
        counts = sorted(at_shape) or profiled
        if "threads" in entry:
            wanted = resolve_threads(entry["threads"], cores)
            counts = [threads for threads in counts if threads in wanted]
        checks += [{"threads": threads, **shape} for threads in counts]
    return checks


def train_settings(train: dict) -> dict[str, dict]:
    """Setting label -> train flags. Labels name the directory of the records (and the rows).

    base: the regular runs; clip-off / clip-on: C7; accum-1xB / accum-KxM: C5 (one batch of B
    vs K micro-batches of M = B/K); batch-N: C4.
    """
    base = {
        "batch": train["batch"],
        "optimizer": train["optimizer"],
        "lr": train["lr"],
        "clip_norm": train["clip_norm"],
        "momentum": 0.0,
        "accumulate": 1,
    }
    experiments = train["experiments"]
    clipping = experiments["clipping"]
    unclipped = base | {key: clipping[key] for key in ("optimizer", "lr", "momentum")}
    unclipped["clip_norm"] = None
    accumulation = experiments["accumulation"]
    k = accumulation["micro_batches"]
    micro = accumulation["batch"] // k
    settings = {
        "base": base,
        "clip-off": unclipped,
        "clip-on": unclipped | {"clip_norm": clipping["clip_norm"]},
        f"accum-1x{accumulation['batch']}": base | {"batch": accumulation["batch"]},
        f"accum-{k}x{micro}": base | {"batch": micro, "accumulate": k},
    }
    settings.update({f"batch-{b}": base | {"batch": b} for b in experiments["batch_sizes"]})
    return settings


TRAIN_JOB_KEYS = ("task", "setting", "variant", "dtype", "device")


def train_jobs(train: dict) -> list[dict]:
    """One dict per (task, setting, variant, dtype, device) training run and `process`, with
    its `steps`.

    A run entry's `steps` (default train.steps) applies to its jobs; a job that several entries
    list takes the steps of the last one. Experiments run train.steps; the batch-size runs in
    train.experiments.repeats processes (0 .. R-1), every other run in process 0.
    """
    jobs: dict[tuple, dict] = {}
    for entry in train["runs"]:
        for variant, task, dtype, device in itertools.product(
            matching_variants(entry["variants"]), entry["tasks"], entry["dtypes"], entry["devices"]
        ):
            job = dict(task=task, setting="base", variant=variant, dtype=dtype, device=device)
            jobs[train_job_key(job)] = job | {"steps": entry.get("steps") or train["steps"]}
    experiments = train["experiments"]
    fixed = {k: experiments[k] for k in ("task", "variant", "dtype", "device")}
    for setting in train_settings(train):
        job = fixed | {"setting": setting, "steps": train["steps"]}
        if setting != "base" and train_job_key(job) not in jobs:
            jobs[train_job_key(job)] = job
    return [
        job | {"process": process}
        for job in jobs.values()
        for process in range(train_processes(train, job["setting"]))
    ]


def train_processes(train: dict, setting: str) -> int:
    """Processes that train a run of `setting`: the batch-size runs' tokens/s decide a verdict,
    so they repeat (train.experiments.repeats); the others' verdicts rest on losses."""
    return train["experiments"]["repeats"] if setting.startswith("batch-") else 1


def train_job_key(job) -> tuple:
    """(task, setting, variant, dtype, device) of a training job or of a rule's wildcards."""
    return tuple(job[key] for key in TRAIN_JOB_KEYS)


def precision_jobs(precision: dict) -> list[dict]:
    """One dict per (variant, dtype, device) of the precision stage that the variant supports."""
    from rnnopt.models.verify import combinations

    triples = combinations(
        matching_variants(precision["variants"]), precision["dtypes"], precision["devices"]
    )
    return [dict(variant=v, dtype=d, device=dev) for v, d, dev in triples]


def profiled_threads(config: dict, cores: int | None = None) -> list[int]:
    """Thread counts that get a GEMM peak and a timer check: those of the profile jobs."""
    return sorted({job["threads"] for job in profile_jobs(config["profile"], cores)})


def peak_dtypes(config: dict, threads: int, cores: int | None = None) -> list[str]:
    """The CPU dtypes whose GEMM ceiling a profile job at `threads` divides by (its "% of
    peak"): the peak job at that thread count measures only these."""
    jobs = profile_jobs(config["profile"], cores)
    used = {job["dtype"] for job in jobs if job["threads"] == threads and job["device"] == "cpu"}
    return sorted(used)


def verify_jobs(config: dict, cores: int | None = None) -> list[dict]:
    """Every (variant, dtype, device) any stage uses, plus the verify entries."""
    combos = [
        dict(variant=v, dtype=d, device=dev)
        for entry in config["verify"]
        for v, d, dev in itertools.product(
            matching_variants(entry["variants"]), entry["dtypes"], entry["devices"]
        )
    ]
    used = (
        train_jobs(config["train"])
        + profile_jobs(config["profile"], cores)
        + measure_jobs(config["memory"], cores)
        + measure_jobs(config["churn"], cores)
        + precision_jobs(config["precision"])
    )
    if profiled_threads(config, cores):
        check = config["timer_check"]
        used.append(dict(variant=check["variant"], dtype=check["dtype"], device="cpu"))
    combos += [{k: job[k] for k in ("variant", "dtype", "device")} for job in used]
    return _unique(combos)
