"""Initial weights shared by every variant: float64, PyTorch layout, PyTorch's init range.

Two families of cells. The recurrent cells (tanh RNN, LSTM) feed h_{t-1} into their gates
through weight_hh. The scan cells (minGRU, minLSTM; Feng et al. 2024, "Were RNNs All We
Needed?") compute their gates from x_t alone, so their only weights are one input projection,
weight_ih (G*H, I) and bias_ih (G*H,): gate order z, h~ (minGRU) and f, i, h~ (minLSTM).
"""

import numpy as np

GATES = {"rnn": 1, "lstm": 4, "mingru": 2, "minlstm": 3}
RECURRENT_CELLS = ("rnn", "lstm")
SCAN_CELLS = ("mingru", "minlstm")
PARAM_NAMES = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")  # of the recurrent cells
SCAN_PARAM_NAMES = ("weight_ih", "bias_ih")


def gate_count(cell: str) -> int:
    if cell not in GATES:
        raise ValueError(f"unknown cell {cell!r}; choose from {sorted(GATES)}")
    return GATES[cell]


def param_names(cell: str) -> tuple[str, ...]:
    """The weight names of `cell`, in the order init_params draws them."""
    gate_count(cell)  # an unknown cell is an error here too
    return SCAN_PARAM_NAMES if cell in SCAN_CELLS else PARAM_NAMES


def init_params(cell: str, input_size: int, hidden_size: int, seed: int) -> dict[str, np.ndarray]:
    """Float64 weights of one recurrent layer in PyTorch layout.

    weight_ih (G*H, I), weight_hh (G*H, H), bias_ih (G*H,), bias_hh (G*H,), G = 4 for LSTM
    (gate order i, f, g, o) and 1 for the tanh RNN; every entry ~ U(-1/sqrt(H), 1/sqrt(H)),
    the range nn.LSTM / nn.RNN use. A scan cell's projection is an nn.Linear:
    weight_ih (G*H, I) and bias_ih (G*H,) ~ U(-1/sqrt(I), 1/sqrt(I)), nn.Linear's range.
    """
    rows = gate_count(cell) * hidden_size
    fan_in = input_size if cell in SCAN_CELLS else hidden_size
    bound = 1.0 / np.sqrt(fan_in)
    rng = np.random.default_rng(seed)
    shapes = {
        "weight_ih": (rows, input_size),
        "weight_hh": (rows, hidden_size),
        "bias_ih": (rows,),
        "bias_hh": (rows,),
    }
    return {name: rng.uniform(-bound, bound, size=shapes[name]) for name in param_names(cell)}


def hidden_size_of(cell: str, params: dict[str, np.ndarray]) -> int:
    return params["weight_ih"].shape[0] // gate_count(cell)


def cell_of(params: dict[str, np.ndarray]) -> str:
    """The recurrent cell (rnn, lstm) of `params`; a scan cell's weights do not tell G."""
    gates = params["weight_hh"].shape[0] // params["weight_hh"].shape[1]
    return {1: "rnn", 4: "lstm"}[gates]
