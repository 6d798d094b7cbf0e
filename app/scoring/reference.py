"""The reference tree scorer: plain numpy, one tree at a time, obviously correct.

Every faster scorer is tested against this one; the trainer uses it to check that what it
exports scores exactly as it trained.
"""

from __future__ import annotations

import numpy as np

from app.artifacts.tree_dump import ZERO_THRESHOLD, Tree, TreeEnsemble


def tree_leaf_index(tree: Tree, features: np.ndarray) -> np.ndarray:
    """Leaf index reached by each row. features: float [n_rows, n_features]."""
    n = features.shape[0]
    if tree.num_nodes == 0:
        return np.zeros(n, dtype=np.int64)
    node = np.zeros(n, dtype=np.int64)  # >= 0 internal node, < 0 leaf ~index
    active = np.arange(n)
    while active.size:
        cur = node[active]
        feat = tree.split_feature[cur]
        value = features[active, feat].astype(np.float64)
        missing = np.isnan(value)
        if tree.missing_zero is not None:
            missing |= tree.missing_zero[cur] & (np.abs(value) <= ZERO_THRESHOLD)
        go_left = np.where(missing, tree.default_left[cur], value <= tree.threshold[cur])
        nxt = np.where(go_left, tree.left[cur], tree.right[cur])
        node[active] = nxt
        active = active[nxt >= 0]
    return ~node


def predict(ensemble: TreeEnsemble, features: np.ndarray) -> np.ndarray:
    """Scores float64 [n_rows] for features [n_rows, num_features]; NaN is a missing value."""
    features = np.asarray(features)
    if features.ndim != 2 or features.shape[1] != ensemble.num_features:
        raise ValueError(
            f"expected features of shape [n, {ensemble.num_features}], got {features.shape}"
        )
    scores = np.full(features.shape[0], ensemble.base_score, dtype=np.float64)
    for tree in ensemble.trees:
        scores += tree.leaf_value[tree_leaf_index(tree, features)]
    return scores
