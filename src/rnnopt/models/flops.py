"""Analytic FLOP and byte models of one recurrent layer, and the metrics derived from them.

Notation: T time steps, B batch, I input size, H hidden size, G gates (4 for LSTM, 1 for the
tanh RNN), P = G*H*(I + H) + 2*G*H parameters. One FLOP is one scalar add, multiply or
activation (sigmoid / tanh count 1 each, the convention that keeps counts comparable; their
real cost is a few instructions).

Forward, per call
    GEMM         2*T*B*G*H*(I + H)   input projection x W_ih^T and recurrence h W_hh^T
    elementwise  T*B*H*e_fwd         e_fwd: LSTM 21, RNN 4, per hidden unit per step:
                 LSTM: z = xW + hW + b_ih + b_hh: 3 adds per gate (12); 4 gate activations;
                       c = f*c + i*g: 3; h = o*tanh(c): 2 (1 tanh, 1 multiply)
                 RNN:  3 adds (z), 1 tanh
Backward (BPTT), per call: the four GEMMs dX = dZ W_ih, dW_ih = dZ^T X, dH = dZ W_hh,
    dW_hh = dZ^T H, each as large as a forward GEMM: 2 x the forward GEMM FLOPs, i.e.
    GEMM 4*T*B*G*H*(I + H); elementwise T*B*H*e_bwd, e_bwd: LSTM 27, RNN 5:
                 LSTM: dh = grad_y + dh_next: 1; do = dh*tanh(c): 1;
                       dc = dc_next + dh*o*(1 - tanh(c)^2): 5;
                       di, df, dg, dc_prev (dc*g, dc*c_prev, dc*i, dc*f): 4;
                       gate pre-activations: s' = s*(1-s) times upstream 3 each for i, f, o,
                       (1 - g^2) times upstream 3 for g: 12; bias sums over B: 4
                 RNN:  dh = grad_y + dh_next: 1; dz = dh*(1 - h^2): 3; bias sum: 1
    The backward phase of the harness times backward alone (its forward runs untimed).
Step = forward + backward + SGD update p -= lr*g (2 FLOPs per parameter: 2*P).

Scan cells (minGRU G = 2, minLSTM G = 3; rnnopt.models.reference): no recurrent GEMM, so
P = G*H*I + G*H, forward GEMM 2*T*B*G*H*I, backward GEMMs (dX, dW_ih) twice that.
Elementwise, per hidden unit per step, of the sequential maths:
                 minGRU  forward 8: bias adds 2, sigmoid, g, 1 - z, z*h~, a*h + b 2;
                         backward 13: dh 1, carry 1, da 1, dz 2, dk_z 3, dk_h 3, bias sums 2
                 minLSTM forward 12: bias adds 3, sigmoids 2, g, f + i, divide, 1 - f',
                         i'*h~, a*h + b 2;
                         backward 19: dh 1, carry 1, da 1, common 4, dk_f 3, dk_i 3,
                         dk_h 3, bias sums 3
    The log-space scan computes the same function with more elementwise work (softplus,
    logaddexp, exp; numpy_scan); the count is the function's, so the scan's extra work
    shows as fewer GFLOP/s, not more FLOPs.

Memory: `memory_model` below.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from rnnopt.models.params import SCAN_CELLS, gate_count

PHASES = ("forward", "backward", "step")
ELEMENTWISE_FORWARD = {"lstm": 21, "rnn": 4, "mingru": 8, "minlstm": 12}
ELEMENTWISE_BACKWARD = {"lstm": 27, "rnn": 5, "mingru": 13, "minlstm": 19}
# Values backward needs per hidden unit per step: LSTM gates i, f, g, o and c (h is y);
# RNN h only (y itself); a scan cell its G logits.
SAVED_PER_UNIT = {"lstm": 5, "rnn": 0, "mingru": 2, "minlstm": 3}
DTYPE_BYTES = {"float64": 8, "float32": 4, "tfloat32": 4, "bfloat16": 2, "float16": 2}


SHAPE_KEYS = ("batch", "seq_len", "input_size", "hidden_size")


@dataclass(frozen=True)
class Shape:
    """One layer call's sizes; SHAPE_KEYS names them in records and configs."""

    batch: int
    seq_len: int
    input_size: int
    hidden_size: int

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def tokens(self) -> int:
        return self.batch * self.seq_len


def recurrent_size(cell: str, hidden_size: int) -> int:
    """Columns of W_hh: H for the recurrent cells, 0 for the scan cells (no W_hh)."""
    return 0 if cell in SCAN_CELLS else hidden_size


def param_count(cell: str, input_size: int, hidden_size: int) -> int:
    """P = G*H*(I + H) + 2*G*H: weight_ih, weight_hh, bias_ih, bias_hh; a scan cell
    G*H*I + G*H (weight_ih, bias_ih)."""
    rows = gate_count(cell) * hidden_size
    biases = 1 if cell in SCAN_CELLS else 2
    return rows * (input_size + recurrent_size(cell, hidden_size)) + biases * rows


def flop_count(cell: str, shape: Shape, phase: str) -> dict:
    """FLOPs of one call of `phase`: {"gemm", "elementwise", "update", "total"}."""
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}; choose from {', '.join(PHASES)}")
    T, B, I, H = shape.seq_len, shape.batch, shape.input_size, shape.hidden_size
    forward_gemm = 2 * T * B * gate_count(cell) * H * (I + recurrent_size(cell, H))
    forward_elementwise = T * B * H * ELEMENTWISE_FORWARD[cell]
    backward_gemm = 2 * forward_gemm
    backward_elementwise = T * B * H * ELEMENTWISE_BACKWARD[cell]
    gemm, elementwise, update = {
        "forward": (forward_gemm, forward_elementwise, 0),
        "backward": (backward_gemm, backward_elementwise, 0),
        "step": (
            forward_gemm + backward_gemm,
            forward_elementwise + backward_elementwise,
            2 * param_count(cell, I, H),
        ),
    }[phase]
    return {
        "gemm": gemm,
        "elementwise": elementwise,
        "update": update,
        "total": gemm + elementwise + update,
    }


def memory_model(cell: str, shape: Shape, dtype: str, phase: str) -> dict:
    """Analytic bytes of one call of `phase` at `dtype` (bfloat16 / float16 counted at 2 B;
    autocast variants keep float32 master weights, which this minimum ignores).

    - inputs_bytes: x (T*B*I) and, for backward / step, grad_y (T*B*H);
    - params_bytes: P; grads_bytes: P for backward / step, else 0;
    - outputs_bytes: y (T*B*H), plus dx (T*B*I) for backward / step;
    - saved_bytes: what BPTT keeps per step beyond y: LSTM gates i, f, g, o and c (5*T*B*H),
      RNN nothing (h is y); so activations + y = T*B*(4H + 2H) for LSTM, T*B*H for RNN;
    - minimum_bytes: what the call must allocate on top of its prepared inputs and weights,
      saved + outputs + grads: the floor the measured peak increment is compared with.
    """
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}; choose from {', '.join(PHASES)}")
    size = DTYPE_BYTES[dtype]
    T, B, I, H = shape.seq_len, shape.batch, shape.input_size, shape.hidden_size
    trains = phase != "forward"
    params = param_count(cell, I, H) * size
    model = {
        "inputs_bytes": (T * B * I + (T * B * H if trains else 0)) * size,
        "params_bytes": params,
        "grads_bytes": params if trains else 0,
        "outputs_bytes": (T * B * H + (T * B * I if trains else 0)) * size,
        "saved_bytes": SAVED_PER_UNIT[cell] * T * B * H * size,
    }
    model["minimum_bytes"] = model["saved_bytes"] + model["outputs_bytes"] + model["grads_bytes"]
    return model


def derived_metrics(
    cell: str, shape: Shape, phase: str, median_ms: float, peak_gflops: float | None = None
) -> dict:
    """Throughput figures of one timed row, a pure function so the aggregate can recompute:
    tokens_per_s = B*T / median s; gflops = analytic FLOPs / median s / 1e9;
    peak_fraction = gflops / peak_gflops (the host's measured GEMM ceiling), when given.
    """
    seconds = median_ms / 1e3
    flops = flop_count(cell, shape, phase)
    derived = {
        "flops": flops["total"],
        "gemm_flops": flops["gemm"],
        "tokens_per_s": shape.tokens / seconds if seconds > 0 else None,
        "gflops": flops["total"] / seconds / 1e9 if seconds > 0 else None,
    }
    if peak_gflops and derived["gflops"] is not None:
        derived["peak_gflops"] = peak_gflops
        derived["peak_fraction"] = derived["gflops"] / peak_gflops
    return derived
