"""CPU cache sizes of this host, per level, for the weights-against-cache experiment (C13).

Read from sysfs (/sys/devices/system/cpu/cpu0/cache/index*/{level,type,size}): the caches of
one core, as the single-threaded sweep sees them (L3 is shared by the cores of a complex).
`lscpu -B` is the fallback where sysfs has no cache directory (some containers); there the
sizes are totals over all instances, which `lscpu` says per level, and are divided by them.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

SYSFS_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")
UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}
# The cache names records carry: data and unified caches (the weights are data).
LEVEL_NAMES = {(1, "Data"): "l1d", (2, "Unified"): "l2", (3, "Unified"): "l3"}


def parse_size(text: str) -> int:
    """'32K' / '1024K' / '32 MiB' / '65536' -> bytes; ValueError on anything else."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(?:i?B)?\s*", text, flags=re.IGNORECASE)
    if match is None:
        raise ValueError(f"not a cache size: {text!r}")
    return int(match.group(1)) * UNITS[match.group(2).upper()]


def from_sysfs(root: Path = SYSFS_CACHE) -> dict[str, int]:
    """{'l1d': bytes, 'l2': bytes, 'l3': bytes} of the levels found under `root`."""
    sizes: dict[str, int] = {}
    for index in sorted(root.glob("index*")):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = parse_size((index / "size").read_text())
        except (OSError, ValueError):
            continue
        name = LEVEL_NAMES.get((level, kind))
        if name is not None:
            sizes[name] = size
    return sizes


def from_lscpu(text: str) -> dict[str, int]:
    """Per-instance sizes from `lscpu` lines such as 'L2 cache: 2 MiB (2 instances)'."""
    sizes: dict[str, int] = {}
    pattern = r"^(L1d|L2|L3) cache:\s*([\d.]+\s*[KMG]i?B?)(?:\s*\((\d+) instances?\))?"
    for match in re.finditer(pattern, text, flags=re.MULTILINE | re.IGNORECASE):
        total = parse_size(match.group(2).replace(" ", ""))
        instances = int(match.group(3) or 1)
        sizes[match.group(1).lower()] = total // instances
    return sizes


def cache_sizes() -> dict:
    """{'l1d': bytes, 'l2': bytes, 'l3': bytes, 'source': 'sysfs' | 'lscpu'}; {} if unknown."""
    sizes = from_sysfs()
    if sizes:
        return {**sizes, "source": "sysfs"}
    try:
        done = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    sizes = from_lscpu(done.stdout) if done.returncode == 0 else {}
    return {**sizes, "source": "lscpu"} if sizes else {}
