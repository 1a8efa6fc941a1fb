"""Analytic memory traffic of one layer call: the bytes each rung reads and writes.

The FLOP model (rnnopt.models.flops) says how much arithmetic a call does; this one says how
many bytes it moves, so that FLOPs / bytes (arithmetic intensity) places a rung on the
roofline. Notation as there (T, B, I, H, G gates), s bytes per element of the dtype,
W_ih = G*H*I and W_hh = G*H*H elements.

Assumption: every operand of a GEMM or an elementwise pass is moved once per use, and nothing
stays in registers between two operations (what a library call on whole arrays does). What
tells the rungs apart is how often each weight matrix is read and how weight gradients are
accumulated:

    weights read            per (sequence, step)   sequence loops (naive, in-place): B*T times
                            per step               batched, tape: W_ih and W_hh T times
                            W_ih once, W_hh T      hoisted input projection (torch cell loop,
                                                    TorchScript, torch.compile, fused, numba,
                                                    nn.LSTM)
    weight gradients        accumulated (read +    per (sequence, step) or per step where the
                            write) per use          forward reads per step (autograd's per-step
                                                    dW_hh for the torch cell loops)
                            written once            fused, numba, nn.LSTM: one GEMM over all steps

Per call, beside the weights: forward reads x (T*B*I), writes then reads the gate
pre-activations (2*T*B*G*H) and reads and writes the states (h, and c for the LSTM) each step;
backward reads the saved activations and grad_y, writes dZ once and reads it twice (the dX
and dW GEMMs), reads x, writes dx and carries dh (dc) per step; the step adds the SGD update
(read p and g, write p: 3*P). Which memory level serves the traffic is the smallest that holds
the working set of a step (`step_working_set`): the weights plus a step's gates and states.

Scan cells have no W_hh (W_hh = 0 elements above) and read W_ih once. The log-space scan
(kind "scan") adds its passes over (B, T, H) arrays: forward about 4 (log a, log b, the
prefix sum, the cumulative logaddexp and exp), each read and written: 8*T*B*H; backward the
reversed scan once per sign of grad_y: 16*T*B*H.
"""

from __future__ import annotations

from rnnopt.models.flops import (
    DTYPE_BYTES,
    PHASES,
    SAVED_PER_UNIT,
    Shape,
    param_count,
    recurrent_size,
)
from rnnopt.models.params import gate_count

SEQUENCE_LOOPS = ("naive", "inplace")
PER_STEP_WEIGHTS = ("batched", "tape")
PER_STEP_WEIGHT_GRADIENTS = ("cell", "jit", "compile")
STATES = {"lstm": 2, "rnn": 1, "mingru": 1, "minlstm": 1}  # h and c, or h
SCAN_PASSES = {"forward": 8, "backward": 16}  # (B, T, H) arrays read + written by the scan


def weight_reads(kind: str, shape: Shape, w_ih: int, w_hh: int) -> int:
    """Elements of W_ih and W_hh one forward pass reads."""
    T, B = shape.seq_len, shape.batch
    if kind in SEQUENCE_LOOPS:
        return B * T * (w_ih + w_hh)
    if kind in PER_STEP_WEIGHTS:
        return T * (w_ih + w_hh)
    return w_ih + T * w_hh


def gradient_traffic(kind: str, shape: Shape, w_ih: int, w_hh: int) -> int:
    """Elements of dW_ih and dW_hh one backward pass reads and writes."""
    T, B = shape.seq_len, shape.batch
    if kind in SEQUENCE_LOOPS:
        return 2 * B * T * (w_ih + w_hh)
    if kind in PER_STEP_WEIGHTS:
        return 2 * T * (w_ih + w_hh)
    if kind in PER_STEP_WEIGHT_GRADIENTS:
        return w_ih + 2 * T * w_hh
    return w_ih + w_hh


def traffic_bytes(kind: str, cell: str, shape: Shape, dtype: str, phase: str) -> dict:
    """Bytes one call of `phase` moves: {"weights", "gradients", "activations", "update",
    "total"}; `kind` is the variant name's last part (naive, fused, nn, ...)."""
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}; choose from {', '.join(PHASES)}")
    s = DTYPE_BYTES[dtype]
    T, B, I, H = shape.seq_len, shape.batch, shape.input_size, shape.hidden_size
    G = gate_count(cell)
    w_ih, w_hh = G * H * I, G * H * recurrent_size(cell, H)
    states = 2 * STATES[cell] * T * B * H  # read the previous, write the next, each step
    scan = SCAN_PASSES if kind == "scan" else {"forward": 0, "backward": 0}
    forward = {
        "weights": weight_reads(kind, shape, w_ih, w_hh),
        "gradients": 0,
        "activations": T * B * I + 2 * T * B * G * H + states + scan["forward"] * T * B * H,
        "update": 0,
    }
    backward = {
        "weights": weight_reads(kind, shape, w_ih, w_hh),
        "gradients": gradient_traffic(kind, shape, w_ih, w_hh),
        "activations": (SAVED_PER_UNIT[cell] + 1) * T * B * H  # saved values and grad_y
        + 3 * T * B * G * H  # dZ written once, read by the dX and dW GEMMs
        + 2 * T * B * I  # x read for dW_ih, dx written
        + states
        + scan["backward"] * T * B * H,
        "update": 0,
    }
    if phase == "forward":
        parts = forward
    elif phase == "backward":
        parts = backward
    else:
        parts = {key: forward[key] + backward[key] for key in forward}
        parts["update"] = 3 * param_count(cell, I, H)
    parts = {key: value * s for key, value in parts.items()}
    return {**parts, "total": sum(parts.values())}


def step_working_set(cell: str, shape: Shape, dtype: str) -> int:
    """Bytes a time step touches again at the next: both weight matrices, the biases, and a
    step's gate pre-activations and states."""
    G, B, I, H = gate_count(cell), shape.batch, shape.input_size, shape.hidden_size
    return (param_count(cell, I, H) + B * G * H + 2 * STATES[cell] * B * H) * DTYPE_BYTES[dtype]
