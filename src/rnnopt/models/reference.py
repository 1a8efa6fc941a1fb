"""The float64 reference every variant is checked against: plain batched forward and BPTT.

Written for reading, not speed. Shapes: x (B, T, I), y (B, T, H); params in PyTorch layout.
The reference itself is checked against torch autograd and finite differences in the tests.
"""

import numpy as np

from rnnopt.models.params import cell_of


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # overflow-free form of 1 / (1 + exp(-z))


def forward(params: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    return _forward(params, x)[0]


def vjp(params: dict[str, np.ndarray], x: np.ndarray, grad_y: np.ndarray) -> dict[str, np.ndarray]:
    """Gradients of sum(y * grad_y) with respect to every parameter and to x."""
    y, cache = _forward(params, x)
    backward = _lstm_backward if cell_of(params) == "lstm" else _rnn_backward
    return backward(params, x, cache, grad_y)


def _forward(params, x):
    x = np.asarray(x, dtype=np.float64)
    B, T, _ = x.shape
    H = params["weight_hh"].shape[1]
    lstm = cell_of(params) == "lstm"
    h = np.zeros((B, H))
    c = np.zeros((B, H))
    hs, cs, acts = [h], [c], []
    for t in range(T):
        z = x[:, t] @ params["weight_ih"].T + params["bias_ih"] + h @ params["weight_hh"].T
        z = z + params["bias_hh"]
        if lstm:
            i, f = sigmoid(z[:, :H]), sigmoid(z[:, H : 2 * H])
            g, o = np.tanh(z[:, 2 * H : 3 * H]), sigmoid(z[:, 3 * H :])
            c = f * c + i * g
            h = o * np.tanh(c)
            acts.append((i, f, g, o))
        else:
            h = np.tanh(z)
        hs.append(h)
        cs.append(c)
    return np.stack(hs[1:], axis=1), (hs, cs, acts)


def _rnn_backward(params, x, cache, grad_y):
    hs, _, _ = cache
    T = x.shape[1]
    grads = {k: np.zeros_like(v) for k, v in params.items()}
    dx = np.zeros_like(x, dtype=np.float64)
    dh_next = np.zeros_like(hs[0])
    for t in reversed(range(T)):
        dh = grad_y[:, t] + dh_next
        dz = dh * (1.0 - hs[t + 1] ** 2)
        grads["weight_ih"] += dz.T @ x[:, t]
        grads["weight_hh"] += dz.T @ hs[t]
        grads["bias_ih"] += dz.sum(axis=0)
        dx[:, t] = dz @ params["weight_ih"]
        dh_next = dz @ params["weight_hh"]
    grads["bias_hh"] = grads["bias_ih"].copy()
    grads["x"] = dx
    return grads


def _lstm_backward(params, x, cache, grad_y):
    hs, cs, acts = cache
    T = x.shape[1]
    grads = {k: np.zeros_like(v) for k, v in params.items()}
    dx = np.zeros_like(x, dtype=np.float64)
    dh_next = np.zeros_like(hs[0])
    dc_next = np.zeros_like(cs[0])
    for t in reversed(range(T)):
        i, f, g, o = acts[t]
        tanh_c = np.tanh(cs[t + 1])
        dh = grad_y[:, t] + dh_next
        dc = dc_next + dh * o * (1.0 - tanh_c**2)
        dz = np.concatenate(
            [
                dc * g * i * (1.0 - i),  # input gate
                dc * cs[t] * f * (1.0 - f),  # forget gate
                dc * i * (1.0 - g**2),  # candidate
                dh * tanh_c * o * (1.0 - o),  # output gate
            ],
            axis=1,
        )
        grads["weight_ih"] += dz.T @ x[:, t]
        grads["weight_hh"] += dz.T @ hs[t]
        grads["bias_ih"] += dz.sum(axis=0)
        dx[:, t] = dz @ params["weight_ih"]
        dh_next = dz @ params["weight_hh"]
        dc_next = dc * f
    grads["bias_hh"] = grads["bias_ih"].copy()
    grads["x"] = dx
    return grads
