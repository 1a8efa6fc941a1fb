"""The traffic model against hand counts at a tiny shape (T=2, B=3, I=4, H=5), float64."""

import pytest

from rnnopt.models.flops import Shape
from rnnopt.models.traffic import step_working_set, traffic_bytes

TINY = Shape(batch=3, seq_len=2, input_size=4, hidden_size=5)
# LSTM: G=4, W_ih = 4*5*4 = 80 and W_hh = 4*5*5 = 100 elements, P = 20*9 + 40 = 220.
# Forward activations: x 2*3*4 = 24, gates written and read 2*(2*3*20) = 240, h and c read
# and written each step 4*(2*3*5) = 120: 384.
FORWARD_ACTIVATIONS = 384
# Backward: saved i, f, g, o, c and grad_y 6*30 = 180, dZ 3*120 = 360, x and dx 2*24 = 48,
# dh and dc 120: 708.
BACKWARD_ACTIVATIONS = 708


@pytest.mark.parametrize(
    ("kind", "weights"),
    [
        ("fused", 80 + 2 * 100),  # W_ih once (hoisted), W_hh every step
        ("nn", 80 + 2 * 100),
        ("cell", 80 + 2 * 100),
        ("batched", 2 * (80 + 100)),  # both every step
        ("naive", 3 * 2 * (80 + 100)),  # both every step of every sequence
    ],
)
def test_forward_bytes_by_hand(kind, weights):
    traffic = traffic_bytes(kind, "lstm", TINY, "float64", "forward")
    assert traffic["weights"] == 8 * weights
    assert traffic["activations"] == 8 * FORWARD_ACTIVATIONS
    assert traffic["total"] == 8 * (weights + FORWARD_ACTIVATIONS)


@pytest.mark.parametrize(
    ("kind", "gradients"),
    [
        ("fused", 80 + 100),  # dW_ih and dW_hh: one GEMM each, written once
        ("cell", 80 + 2 * 2 * 100),  # autograd accumulates dW_hh every step (read + write)
        ("batched", 2 * 2 * (80 + 100)),
        ("inplace", 2 * 3 * 2 * (80 + 100)),
    ],
)
def test_backward_weight_gradients_by_hand(kind, gradients):
    traffic = traffic_bytes(kind, "lstm", TINY, "float64", "backward")
    assert traffic["gradients"] == 8 * gradients
    assert traffic["activations"] == 8 * BACKWARD_ACTIVATIONS


def test_step_is_forward_plus_backward_plus_the_update():
    parts = [traffic_bytes("fused", "lstm", TINY, "float32", p) for p in ("forward", "backward")]
    step = traffic_bytes("fused", "lstm", TINY, "float32", "step")
    assert step["update"] == 4 * 3 * 220  # read p and g, write p
    assert step["total"] == parts[0]["total"] + parts[1]["total"] + step["update"]
    assert step["total"] == 4 * (280 + 384 + 280 + 180 + 708 + 660)


def test_rnn_forward_by_hand():
    # G=1: W_ih 20, W_hh 25; x 24, pre-activations 2*30, h read and written 2*30.
    traffic = traffic_bytes("fused", "rnn", TINY, "float64", "forward")
    assert traffic["total"] == 8 * (20 + 2 * 25 + 24 + 60 + 60)


def test_bytes_scale_with_the_dtype_and_the_phase_is_checked():
    wide = traffic_bytes("nn", "lstm", TINY, "float64", "step")["total"]
    assert traffic_bytes("nn", "lstm", TINY, "bfloat16", "step")["total"] * 4 == wide
    with pytest.raises(ValueError, match="unknown phase 'sideways'"):
        traffic_bytes("nn", "lstm", TINY, "float64", "sideways")


def test_step_working_set_is_the_weights_and_one_steps_gates_and_states():
    # P = 220, gates B*G*H = 60, h and c read and written 4*B*H = 60
    assert step_working_set("lstm", TINY, "float32") == 4 * (220 + 60 + 60)
