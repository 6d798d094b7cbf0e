"""Adding a freshly grown tree's outputs to running scores, on binned features.

On bins, `bin <= split bin` is exactly `x <= threshold` of the exported tree (see binning), so
these scores equal what the exported model gives for the same rows.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

# Rows below which a tree is applied on one thread.
PARALLEL_ROWS = 50_000


@njit(cache=True, nogil=True)
def add_leaf_values(
    order: np.ndarray,
    leaf_start: np.ndarray,
    leaf_count: np.ndarray,
    values: np.ndarray,
    scores: np.ndarray,
) -> None:
    """scores[rows of leaf l] += values[l] for the rows the tree was grown on (order, by leaf)."""
    for leaf in range(values.size):
        v = values[leaf]
        for p in range(leaf_start[leaf], leaf_start[leaf] + leaf_count[leaf]):
            scores[order[p]] += v


@njit(cache=True, nogil=True)
def _add_one(
    bins: np.ndarray,
    n_real: np.ndarray,
    nodes: np.ndarray,
    values: np.ndarray,
    r: int,
    scores: np.ndarray,
) -> None:
    node = 0
    if values.size > 1:
        while node >= 0:
            f = nodes[node, 0]
            v = bins[f, r]
            go_left = nodes[node, 2] != 0 if v == n_real[f] else v <= nodes[node, 1]
            node = nodes[node, 3] if go_left else nodes[node, 4]
        node = ~node
    scores[r] += values[node]


@njit(cache=True, nogil=True, parallel=True)
def add_tree(
    bins: np.ndarray,
    n_real: np.ndarray,
    nodes: np.ndarray,
    values: np.ndarray,
    rows: np.ndarray,
    scores: np.ndarray,
) -> None:
    """scores[rows] += the tree's output, walking nodes [n_nodes, 5] = (feature, bin,
    default_left, left, right) on bins [n_features, n_docs]."""
    if rows.size < PARALLEL_ROWS:
        for i in range(rows.size):
            _add_one(bins, n_real, nodes, values, rows[i], scores)
    else:
        for i in prange(rows.size):
            _add_one(bins, n_real, nodes, values, rows[i], scores)
