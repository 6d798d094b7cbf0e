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
) -> None:
    """hist [>= n_bins, 3] from the bins column [n_docs] of rows [n] whose gradients are given in
    the same order, ordered_grad / ordered_hess [n] (contiguous reads in the hot loop)."""
    for b in range(n_bins):
        hist[b, GRAD] = 0.0
        hist[b, HESS] = 0.0
        hist[b, COUNT] = 0.0
    for i in range(rows.size):
        b = column[rows[i]]
        hist[b, GRAD] += ordered_grad[i]
        hist[b, HESS] += ordered_hess[i]
        hist[b, COUNT] += 1.0


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
    for j in range(k):
        f = feats[j]
        h = hist[f]
        column = scratch[j]
        for b in range(n_real[f] + 1):
            h[b, GRAD] = 0.0
            h[b, HESS] = 0.0
            h[b, COUNT] = 0.0
        for i in range(n):
            b = column[i]
            h[b, GRAD] += ordered_grad[i]
            h[b, HESS] += ordered_hess[i]
            h[b, COUNT] += 1.0
