"""Initial weights shared by every variant: float64, PyTorch layout, PyTorch's init range."""

import numpy as np

GATES = {"rnn": 1, "lstm": 4}
PARAM_NAMES = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")


def gate_count(cell: str) -> int:
    if cell not in GATES:
        raise ValueError(f"unknown cell {cell!r}; choose from {sorted(GATES)}")
    return GATES[cell]


def init_params(cell: str, input_size: int, hidden_size: int, seed: int) -> dict[str, np.ndarray]:
    """Float64 weights of one recurrent layer in PyTorch layout.

    weight_ih (G*H, I), weight_hh (G*H, H), bias_ih (G*H,), bias_hh (G*H,), G = 4 for LSTM
    (gate order i, f, g, o) and 1 for the tanh RNN; every entry ~ U(-1/sqrt(H), 1/sqrt(H)),
    the range nn.LSTM / nn.RNN use.
    """
    rows = gate_count(cell) * hidden_size
    bound = 1.0 / np.sqrt(hidden_size)
    rng = np.random.default_rng(seed)
    shapes = {
        "weight_ih": (rows, input_size),
        "weight_hh": (rows, hidden_size),
        "bias_ih": (rows,),
        "bias_hh": (rows,),
    }
    return {name: rng.uniform(-bound, bound, size=shape) for name, shape in shapes.items()}


def hidden_size_of(params: dict[str, np.ndarray]) -> int:
    return params["weight_hh"].shape[1]


def cell_of(params: dict[str, np.ndarray]) -> str:
    gates = params["weight_hh"].shape[0] // params["weight_hh"].shape[1]
    return {1: "rnn", 4: "lstm"}[gates]
