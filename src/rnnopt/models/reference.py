"""The float64 reference every variant is checked against: plain batched forward and BPTT.

Written for reading, not speed. Shapes: x (B, T, I), y (B, T, H); params in PyTorch layout.
The reference itself is checked against torch autograd and finite differences in the tests.

The scan cells (minGRU, minLSTM) are the sequential recurrence h_t = a_t * h_{t-1} + b_t,
h_0 = 0, with a_t in (0, 1) and b_t > 0 computed from x_t alone:
    minGRU   z = sigmoid(k_z), h~ = g(k_h);              a = 1 - z,  b = z * h~
    minLSTM  f = sigmoid(k_f), i = sigmoid(k_i), h~ = g(k_h);
             f' = f / (f + i), i' = i / (f + i) = 1 - f';  a = f',   b = i' * h~
with k = x W_ih^T + b_ih and g(v) = v + 1/2 (v >= 0), sigmoid(v) (v < 0): the paper's
positive candidate activation, which lets the parallel variants scan in log space.
"""

import numpy as np

from rnnopt.models.params import SCAN_CELLS, cell_of, gate_count


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # overflow-free form of 1 / (1 + exp(-z))


def forward(params: dict[str, np.ndarray], x: np.ndarray, cell: str | None = None) -> np.ndarray:
    """y of the layer; `cell` is needed for a scan cell (its weights do not say which)."""
    if cell in SCAN_CELLS:
        return _scan_forward(cell, params, x)[0]
    return _forward(params, x)[0]


def vjp(
    params: dict[str, np.ndarray], x: np.ndarray, grad_y: np.ndarray, cell: str | None = None
) -> dict[str, np.ndarray]:
    """Gradients of sum(y * grad_y) with respect to every parameter and to x."""
    if cell in SCAN_CELLS:
        y, cache = _scan_forward(cell, params, x)
        return _scan_backward(cell, params, x, y, cache, grad_y)
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


# ---------------------------------------------------------------- scan cells


def g(v: np.ndarray) -> np.ndarray:
    """The scan cells' candidate activation: continuous and positive."""
    return np.where(v >= 0, v + 0.5, sigmoid(v))


def g_derivative(v: np.ndarray) -> np.ndarray:
    s = sigmoid(v)
    return np.where(v >= 0, 1.0, s * (1.0 - s))


def softplus(v: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, v)  # log(1 + exp(v)) without overflow


def normalised_forget(k_f: np.ndarray, k_i: np.ndarray) -> np.ndarray:
    """f / (f + i) as sigmoid(log f - log i): no 0 / 0 where both gates underflow."""
    return sigmoid(softplus(-k_i) - softplus(-k_f))


def _scan_forward(cell, params, x):
    x = np.asarray(x, dtype=np.float64)
    H = params["weight_ih"].shape[0] // gate_count(cell)
    k = x @ params["weight_ih"].T + params["bias_ih"]  # (B, T, G*H): every step at once
    if cell == "mingru":
        z, h_tilde = sigmoid(k[..., :H]), g(k[..., H:])
        a, b = 1.0 - z, z * h_tilde
    else:
        a = normalised_forget(k[..., :H], k[..., H : 2 * H])
        b = (1.0 - a) * g(k[..., 2 * H :])
    h = np.zeros((x.shape[0], H))
    hs = []
    for t in range(x.shape[1]):
        h = a[:, t] * h + b[:, t]
        hs.append(h)
    return np.stack(hs, axis=1), (k, a)


def _scan_backward(cell, params, x, y, cache, grad_y):
    k, a = cache
    H = a.shape[2]
    h_prev = np.concatenate([np.zeros_like(y[:, :1]), y[:, :-1]], axis=1)
    dh = np.zeros_like(y)  # d loss / d h_t, through every later step
    dh_next = np.zeros_like(y[:, 0])
    for t in reversed(range(y.shape[1])):
        dh[:, t] = grad_y[:, t] + dh_next
        dh_next = dh[:, t] * a[:, t]
    da, db = dh * h_prev, dh  # h_t = a_t * h_{t-1} + b_t
    if cell == "mingru":
        z, k_h = sigmoid(k[..., :H]), k[..., H:]
        dk = np.concatenate(
            [(db * g(k_h) - da) * z * (1.0 - z), db * z * g_derivative(k_h)], axis=2
        )
    else:
        f, i, k_h = sigmoid(k[..., :H]), sigmoid(k[..., H : 2 * H]), k[..., 2 * H :]
        f_norm = normalised_forget(k[..., :H], k[..., H : 2 * H])
        i_norm = 1.0 - f_norm
        d_f_norm = da - db * g(k_h)  # b = (1 - f') * h~
        dk = np.concatenate(
            [
                d_f_norm * f_norm * i_norm * (1.0 - f),
                -d_f_norm * f_norm * i_norm * (1.0 - i),
                db * i_norm * g_derivative(k_h),
            ],
            axis=2,
        )
    return {
        "weight_ih": np.einsum("btg,bti->gi", dk, x),
        "bias_ih": dk.sum(axis=(0, 1)),
        "x": dk @ params["weight_ih"],
    }
