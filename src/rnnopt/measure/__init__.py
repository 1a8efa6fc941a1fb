"""Instruments: timing, counters, memory peaks, GEMM ceilings, threads, the host's
fingerprint, and the harness that builds a variant's runner for them."""
