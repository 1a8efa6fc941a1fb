"""The theoretical FMA peak of the CPU, shown beside the measured GEMM ceiling (never used as
the roofline: it is only known where the frequency and the vector datapath are).

peak GFLOP/s = threads x MHz x FMA pipes x 2 (an FMA is two FLOPs) x lanes, with lanes = the
datapath width / the dtype's bits. The datapath is the widest vector ISA the CPU reports
(/proc/cpuinfo flags: avx512f 512 bits, avx2 256, else 128), except on AMD before Zen 5
(family < 0x1a), whose cores execute AVX-512 as two 256-bit halves. FMA_PIPES = 2: every
x86 server core since Haswell / Zen 1 issues two vector FMAs per cycle. The frequency is
/proc/cpuinfo's `cpu MHz`: in a VM that is the nominal (TSC) clock, so a boosting core can
beat this "peak"; it is context, and the measured ceiling stays the reference.
"""

from __future__ import annotations

from pathlib import Path

FMA_PIPES = 2
DTYPE_BITS = {"float64": 64, "float32": 32}
ZEN5_FAMILY = 0x1A


def host_cpuinfo() -> str | None:
    """This host's /proc/cpuinfo, or None where there is none."""
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return None


def cpuinfo_fields(text: str) -> dict[str, str]:
    """The first processor's `key: value` lines of /proc/cpuinfo."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def datapath_bits(fields: dict[str, str]) -> int:
    flags = set(fields.get("flags", "").split())
    if "avx512f" in flags:
        amd = fields.get("vendor_id") == "AuthenticAMD"
        family = int(fields.get("cpu family", "0") or 0)
        return 256 if amd and family < ZEN5_FAMILY else 512
    return 256 if "avx2" in flags else 128


def theoretical_gflops(threads: int, cpuinfo: str | None = None) -> dict:
    """{"float64", "float32": GFLOP/s, "mhz", "datapath_bits", "fma_pipes"}; {} when unknown."""
    cpuinfo = host_cpuinfo() if cpuinfo is None else cpuinfo
    if cpuinfo is None:
        return {}
    fields = cpuinfo_fields(cpuinfo)
    try:
        mhz = float(fields["cpu MHz"])
    except (KeyError, ValueError):
        return {}
    bits = datapath_bits(fields)
    per_cycle = {dtype: FMA_PIPES * 2 * bits // width for dtype, width in DTYPE_BITS.items()}
    return {
        **{dtype: threads * mhz * flops / 1e3 for dtype, flops in per_cycle.items()},
        "mhz": mhz,
        "datapath_bits": bits,
        "fma_pipes": FMA_PIPES,
    }


# CPU flags of native bfloat16 arithmetic: x86 AVX-512 BF16 or AMX, Arm's BF16 extension
# (/proc/cpuinfo "Features" there). Without them oneDNN emulates bfloat16 in float32 with
# conversions: measured here 7x slower than float32 at the fastrnns shape on an AVX2 Zen 3.
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")


def native_bf16(cpuinfo: str | None = None) -> bool:
    """Whether the CPU reports bfloat16 arithmetic (NATIVE_BF16_FLAGS); False when unknown."""
    cpuinfo = host_cpuinfo() if cpuinfo is None else cpuinfo
    if cpuinfo is None:
        return False
    fields = cpuinfo_fields(cpuinfo)
    flags = set((fields.get("flags", "") + " " + fields.get("Features", "")).split())
    return any(flag in flags for flag in NATIVE_BF16_FLAGS)
