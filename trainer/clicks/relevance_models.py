"""Relevance models for the M-step of position-bias EM (trainer.clicks.propensity): each
predicts gamma = P(relevant) per row [n] and takes one step towards soft targets P(R=1 | c) [n].
`params` is the flat parameter vector (for EM acceleration) and `bounds` its valid range."""

from __future__ import annotations

import numpy as np
from numba import njit

_EPS = 1e-6


def _bin_columns(features: np.ndarray, bins: int) -> tuple[np.ndarray, int]:
    """Column index of each (row, feature) in a one-hot design: int64 [n, n_features], and the
    number of columns. Each feature gets up to `bins` quantile bins plus one for NaN."""
    n, n_features = features.shape
    cols = np.empty((n, n_features), dtype=np.int64)
    offset = 0
    qs = np.linspace(0.0, 1.0, bins + 1)[1:-1]
    for f in range(n_features):
        x = features[:, f].astype(np.float64)
        finite = np.isfinite(x)
        edges = np.unique(np.quantile(x[finite], qs)) if finite.any() else np.empty(0)
        b = np.searchsorted(edges, x, side="right")
        b[~finite] = edges.size + 1
        cols[:, f] = offset + b
        offset += edges.size + 2
    return cols, offset


@njit(cache=True, nogil=True)
def _logits(cols: np.ndarray, w: np.ndarray) -> np.ndarray:
    """b + sum_f w[cols[i, f]] per row: float64 [n]. The intercept b is w[-1]."""
    n, f = cols.shape
    out = np.full(n, w[-1])
    for i in range(n):
        for j in range(f):
            out[i] += w[cols[i, j]]
    return out


@njit(cache=True, nogil=True)
def _gradient(cols: np.ndarray, residual: np.ndarray, d: int) -> np.ndarray:
    """X^T residual [d] of the one-hot design plus intercept (the last column)."""
    n, f = cols.shape
    grad = np.zeros(d)
    for i in range(n):
        grad[d - 1] += residual[i]
        for a in range(f):
            grad[cols[i, a]] += residual[i]
    return grad


@njit(cache=True, nogil=True)
def _hessian(cols: np.ndarray, h: np.ndarray, d: int) -> np.ndarray:
    """X^T diag(h) X [d, d] of the one-hot design plus intercept (the last column)."""
    n, f = cols.shape
    hess = np.zeros((d, d))
    for i in range(n):
        hess[d - 1, d - 1] += h[i]
        for a in range(f):
            ca = cols[i, a]
            hess[ca, d - 1] += h[i]
            hess[d - 1, ca] += h[i]
            for b in range(f):
                hess[ca, cols[i, b]] += h[i]
    return hess


@njit(cache=True, nogil=True)
def _matvec(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """a @ x without BLAS: a small product not worth waking (or waiting for) BLAS threads."""
    out = np.zeros(a.shape[0])
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            out[i] += a[i, j] * x[j]
    return out


class AdditiveLogit:
    """gamma = sigmoid(b + sum_f w[bin of feature f]); Newton steps on soft targets. The one-hot
    design is kept as column indices [n, n_features], never materialised. The Hessian changes
    slowly between EM iterations, so it is recomputed every HESSIAN_EVERY steps only."""

    HESSIAN_EVERY = 5

    def __init__(self, features: np.ndarray, bins: int, l2: float) -> None:
        self.cols, width = _bin_columns(features, bins)
        self.width = width + 1  # the last column is the intercept (not regularised)
        self.penalty = np.full(self.width, l2)
        self.penalty[width] = 0.0
        self.w = np.zeros(self.width)
        self.steps = 0
        self.inverse_hessian = np.eye(self.width)

    bounds = (-np.inf, np.inf)

    @property
    def params(self) -> np.ndarray:
        return self.w

    @params.setter
    def params(self, value: np.ndarray) -> None:
        self.w = value

    def predict(self) -> np.ndarray:
        return np.asarray(1.0 / (1.0 + np.exp(-_logits(self.cols, self.w))))

    def step(self, target: np.ndarray) -> None:
        p = self.predict()
        if self.steps % self.HESSIAN_EVERY == 0:
            hess = _hessian(self.cols, p * (1.0 - p), self.width)
            hess[np.diag_indices_from(hess)] += self.penalty + _EPS
            self.inverse_hessian = np.linalg.inv(hess)
        self.steps += 1
        grad = _gradient(self.cols, p - target, self.width) + self.penalty * self.w
        self.w = self.w - _matvec(self.inverse_hessian, grad)


class PairMeans:
    """gamma per (query, document) key: the mean of P(R=1 | c) over that key's rows."""

    def __init__(self, keys: np.ndarray) -> None:
        _, self.inverse = np.unique(keys, return_inverse=True)
        self.count = np.bincount(self.inverse).astype(np.float64)
        self.gamma = np.full(self.count.size, 0.5)

    bounds = (_EPS, 1.0 - _EPS)

    @property
    def params(self) -> np.ndarray:
        return self.gamma

    @params.setter
    def params(self, value: np.ndarray) -> None:
        self.gamma = value

    def predict(self) -> np.ndarray:
        return np.asarray(self.gamma[self.inverse])

    def step(self, target: np.ndarray) -> None:
        self.gamma = np.bincount(self.inverse, weights=target) / self.count
