"""Gradient histograms of one feature over a leaf's rows: [n_bins, 3] = (sum lambda, sum hessian,
count) per bin. A larger sibling's histogram is its parent's minus the smaller sibling's."""

from __future__ import annotations

import numpy as np
from numba import njit

GRAD = 0
HESS = 1
COUNT = 2


@njit(cache=True, nogil=True)
def build_feature_histogram(
    column: np.ndarray,
    rows: np.ndarray,
    ordered_grad: np.ndarray,
    ordered_hess: np.ndarray,
    hist: np.ndarray,
    n_bins: int,
    spare: np.ndarray,
) -> None:
    """hist [>= n_bins, 3] from the bins column [n_docs] of rows [n] whose gradients are given in
    the same order, ordered_grad / ordered_hess [n] (contiguous reads in the hot loop). spare
    [>= n_bins, 3] is scratch: odd rows accumulate there, so that runs of rows in one bin (a
    feature's many zeros) do not wait on each other's additions."""
    for b in range(n_bins):
        hist[b, GRAD] = 0.0
        hist[b, HESS] = 0.0
        hist[b, COUNT] = 0.0
    n = rows.size
    if n < 2 * n_bins:
        for i in range(n):
            b = column[rows[i]]
            hist[b, GRAD] += ordered_grad[i]
            hist[b, HESS] += ordered_hess[i]
            hist[b, COUNT] += 1.0
        return
    for b in range(n_bins):
        spare[b, GRAD] = 0.0
        spare[b, HESS] = 0.0
        spare[b, COUNT] = 0.0
    for i in range(0, n - 1, 2):
        b0 = column[rows[i]]
        b1 = column[rows[i + 1]]
        hist[b0, GRAD] += ordered_grad[i]
        hist[b0, HESS] += ordered_hess[i]
        hist[b0, COUNT] += 1.0
        spare[b1, GRAD] += ordered_grad[i + 1]
        spare[b1, HESS] += ordered_hess[i + 1]
        spare[b1, COUNT] += 1.0
    if n % 2:
        b = column[rows[n - 1]]
        hist[b, GRAD] += ordered_grad[n - 1]
        hist[b, HESS] += ordered_hess[n - 1]
        hist[b, COUNT] += 1.0
    for b in range(n_bins):
        hist[b, GRAD] += spare[b, GRAD]
        hist[b, HESS] += spare[b, HESS]
        hist[b, COUNT] += spare[b, COUNT]


@njit(cache=True, nogil=True)
def subtract_histogram(parent: np.ndarray, child: np.ndarray, n_bins: int) -> None:
    """parent [>= n_bins, 3] -= child, in place: the parent's buffer becomes the sibling's."""
    for b in range(n_bins):
        parent[b, GRAD] -= child[b, GRAD]
        parent[b, HESS] -= child[b, HESS]
        parent[b, COUNT] -= child[b, COUNT]


@njit(cache=True, nogil=True)
def build_gathered_histograms(
    row_bins: np.ndarray,
    rows: np.ndarray,
    ordered_grad: np.ndarray,
    ordered_hess: np.ndarray,
    feats: np.ndarray,
    n_real: np.ndarray,
    hist: np.ndarray,
    scratch: np.ndarray,
) -> None:
    """Histograms [n_features, stride, 3] of the features `feats` [k] for rows scattered thinly
    over the data: their bins are first copied row by row (one or two cache lines each) from the
    row-major bins [n_docs, n_features] into scratch [>= k, >= n_rows], then counted column by
    column from there, where reading a column per feature would cost a cache line per value."""
    n = rows.size
    k = feats.size
    for i in range(n):
        src = row_bins[rows[i]]
        for j in range(k):
            scratch[j, i] = src[feats[j]]
    identity = np.arange(n)
    spare = np.empty((hist.shape[1], 3))
    for j in range(k):
        f = feats[j]
        build_feature_histogram(
            scratch[j], identity, ordered_grad, ordered_hess, hist[f], n_real[f] + 1, spare
        )
