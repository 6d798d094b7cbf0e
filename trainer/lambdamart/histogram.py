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
