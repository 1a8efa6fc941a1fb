"""NumPy minGRU / minLSTM: the recurrence h_t = a_t * h_{t-1} + b_t computed two ways.

Both rungs hoist the input projection (one (B*T, I) x (I, G*H) GEMM: the gates depend on x_t
only) and share the backward from (da, db) to the weights; they differ in the recurrence
(maths in rnnopt.models.reference):

- seq: T dependent steps, each an in-place multiply-add on a (B, H) state;
- scan: Heinsen's log-space parallel scan ("Efficient Parallelization of a Ubiquitous
  Sequential Computation", 2023). With A_t = sum_{s<=t} log a_s and h_0 = 0,
      log h_t = A_t + logcumsumexp_{s<=t}(log b_s - A_s),
  so all T steps are two cumulative passes along time (np.cumsum, np.logaddexp.accumulate)
  with no Python loop. log a and log b come from the logits through softplus, never through
  a rounded a or b. Backward is the same scan reversed in time:
      dh_t = sum_{s>=t} exp(A_s - A_t) * grad_y_s,
  on the positive and the negative part of grad_y apart (a log needs a positive value).
  Both scans subtract numbers of size |A_t| ~ T, so their relative rounding grows about
  linearly with T (the precision experiment reports it; tests/test_scan_cells.py bounds it).
"""

from __future__ import annotations

import numpy as np

from rnnopt.models.variants.base import NumpyVariant
from rnnopt.models.variants.numpy_common import sigmoid


def softplus(v: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, v).astype(v.dtype, copy=False)


def normalised_forget(k_f: np.ndarray, k_i: np.ndarray) -> np.ndarray:
    """minLSTM's f / (f + i) as sigmoid(log f - log i): no 0 / 0 where both gates underflow."""
    return sigmoid(softplus(-k_i) - softplus(-k_f))


def candidate(v: np.ndarray) -> np.ndarray:
    """g(v): v + 1/2 for v >= 0, sigmoid(v) below."""
    return np.where(v >= 0, v + 0.5, sigmoid(v))


def log_candidate(v: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):  # the branch np.where drops
        return np.where(v >= 0, np.log(v + 0.5), -softplus(-v))


def candidate_derivative(v: np.ndarray) -> np.ndarray:
    s = sigmoid(v)
    return np.where(v >= 0, 1.0, s * (1.0 - s))


class NumpyScanCell(NumpyVariant):
    """Shared parts: projection, gates in linear space, and the backward below dh."""

    techniques = ("batching", "hoisted-input-projection")

    def split(self, k):
        H = k.shape[-1] // self.gates
        return [k[..., g * H : (g + 1) * H] for g in range(self.gates)]

    def project(self, p, x):
        B, T, I = x.shape
        k = (x.reshape(B * T, I) @ p["weight_ih"].T).reshape(B, T, -1)
        k += p["bias_ih"]
        return k

    def coefficients(self, k):
        """a, b (B, T, H) in linear space."""
        if self.cell == "mingru":
            k_z, k_h = self.split(k)
            z = sigmoid(k_z)
            return 1.0 - z, z * candidate(k_h)
        k_f, k_i, k_h = self.split(k)
        a = normalised_forget(k_f, k_i)
        return a, (1.0 - a) * candidate(k_h)

    def backward(self, p, cache, grad_y):
        x, k, y = cache["x"], cache["k"], cache["y"]
        dh = self.state_gradient(cache, grad_y)
        h_prev = np.zeros_like(y)
        h_prev[:, 1:] = y[:, :-1]
        da = dh * h_prev  # h_t = a_t * h_{t-1} + b_t; db = dh
        dk = np.empty_like(k)
        if self.cell == "mingru":
            k_z, k_h = self.split(k)
            dk_z, dk_h = self.split(dk)
            z = sigmoid(k_z)
            np.multiply((dh * candidate(k_h) - da) * z, 1.0 - z, out=dk_z)
            np.multiply(dh * z, candidate_derivative(k_h), out=dk_h)
        else:
            k_f, k_i, k_h = self.split(k)
            dk_f, dk_i, dk_h = self.split(dk)
            f, i = sigmoid(k_f), sigmoid(k_i)
            f_norm = normalised_forget(k_f, k_i)
            i_norm = 1.0 - f_norm
            common = (da - dh * candidate(k_h)) * f_norm * i_norm  # dL/df' * f' * i'
            np.multiply(common, 1.0 - f, out=dk_f)
            np.multiply(-common, 1.0 - i, out=dk_i)
            np.multiply(dh * i_norm, candidate_derivative(k_h), out=dk_h)
        B, T, I = x.shape
        dk_rows = dk.reshape(B * T, -1)
        return {
            "weight_ih": dk_rows.T @ x.reshape(B * T, I),
            "bias_ih": dk_rows.sum(axis=0),
            "x": (dk_rows @ p["weight_ih"]).reshape(B, T, I),
        }

    def state_gradient(self, cache, grad_y):
        """dh (B, T, H): d loss / d h_t through h_t's own output and every later step."""
        raise NotImplementedError


class NumpyScanSeq(NumpyScanCell):
    kind = "seq"
    summary = (
        "the sequential recurrence: hoisted projection, gates for all steps at once, then a "
        "Python loop of T in-place multiply-adds on the (B, H) state"
    )

    def forward_train(self, p, x):
        k = self.project(p, x)
        a, b = self.coefficients(k)
        y = np.empty_like(b)
        h = np.zeros_like(b[:, 0])
        for t in range(x.shape[1]):
            np.multiply(a[:, t], h, out=y[:, t])
            y[:, t] += b[:, t]
            h = y[:, t]
        return y, {"x": x, "k": k, "y": y, "a": a}

    def state_gradient(self, cache, grad_y):
        a = cache["a"]
        dh = np.empty_like(grad_y)
        carry = np.zeros_like(grad_y[:, 0])
        for t in reversed(range(grad_y.shape[1])):
            np.add(grad_y[:, t], carry, out=dh[:, t])
            carry = dh[:, t] * a[:, t]
        return dh


class NumpyScanParallel(NumpyScanCell):
    kind = "scan"
    techniques = ("batching", "hoisted-input-projection", "parallel-scan")
    summary = (
        "the log-space parallel scan (Heinsen 2023): all T steps as a cumulative sum and a "
        "cumulative logaddexp along time, no loop over steps; backward the same scan reversed"
    )
    memory_note = "the scan keeps (B, T, H) log-coefficients and their prefix sums"

    def log_coefficients(self, k):
        """log a, log b (B, T, H), from the logits through softplus."""
        if self.cell == "mingru":
            k_z, k_h = self.split(k)
            return -softplus(k_z), -softplus(-k_z) + log_candidate(k_h)
        k_f, k_i, k_h = self.split(k)
        diff = softplus(-k_f) - softplus(-k_i)  # log(i / f)
        return -softplus(diff), -softplus(-diff) + log_candidate(k_h)

    def forward_train(self, p, x):
        k = self.project(p, x)
        log_a, log_b = self.log_coefficients(k)
        prefix = np.cumsum(log_a, axis=1)  # A_t
        log_h = np.logaddexp.accumulate(log_b - prefix, axis=1)
        log_h += prefix
        y = np.exp(log_h)
        return y, {"x": x, "k": k, "y": y, "prefix": prefix}

    def state_gradient(self, cache, grad_y):
        prefix = cache["prefix"]
        dh = np.zeros_like(grad_y)
        with np.errstate(divide="ignore"):  # log 0 = -inf: an entry of the other sign
            for sign in (1.0, -1.0):
                log_part = np.log(np.maximum(sign * grad_y, 0.0)) + prefix
                reversed_sum = np.logaddexp.accumulate(log_part[:, ::-1], axis=1)[:, ::-1]
                dh += sign * np.exp(reversed_sum - prefix)
        return dh
