"""A tree ensemble as the flat arrays the TreeSHAP kernel walks, plus its expected value.

Built once per model (lazily, on the first explanation) from the same tree dump the scorer
compiles, so explanations and scores make the same decisions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app.artifacts.tree_dump import Tree, TreeEnsemble
from app.errors import LtrError

NO_COVERS = (
    "explanations need node covers (training counts per node), which this model's tree dump "
    "lacks; re-export it with this version of `ltr train`, or convert it again with `ltr convert`"
)


class ExplainUnavailable(LtrError, ValueError):
    """The model cannot be explained (the message says why and what to do)."""


@dataclass(frozen=True)
class TreeTables:
    """Every tree's nodes and leaves concatenated; tree t owns nodes
    node_offset[t]:node_offset[t+1] and leaves leaf_offset[t]:leaf_offset[t+1]."""

    num_features: int
    split_feature: np.ndarray  # int64 [total_nodes]
    threshold: np.ndarray  # float64 [total_nodes]
    left: np.ndarray  # int64 [total_nodes], tree-local; negative = leaf ~c
    right: np.ndarray  # int64 [total_nodes]
    default_left: np.ndarray  # bool [total_nodes]
    missing_zero: np.ndarray  # bool [total_nodes]
    cover: np.ndarray  # float64 [total_nodes]
    leaf_cover: np.ndarray  # float64 [total_leaves]
    leaf_value: np.ndarray  # float64 [total_leaves]
    node_offset: np.ndarray  # int64 [n_trees + 1]
    leaf_offset: np.ndarray  # int64 [n_trees + 1]
    max_depth: int  # splits on the longest root-to-leaf path
    expected_value: float  # base_score + each tree's cover-weighted mean leaf value


def tree_depth(tree: Tree) -> int:
    """Splits on the longest root-to-leaf path (0 for a single leaf)."""
    if tree.num_nodes == 0:
        return 0
    deepest, stack = 0, [(0, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack += [(int(c), depth + 1) for c in (tree.left[node], tree.right[node]) if c >= 0]
    return deepest


def tree_expected_value(tree: Tree) -> float:
    """E[tree(x)] over the training data: leaves weighted by cover / root cover (LightGBM's
    Tree::ExpectedValue, summed in leaf order as it does)."""
    if tree.num_nodes == 0:
        return float(tree.leaf_value[0])
    assert tree.cover is not None and tree.leaf_cover is not None
    total = float(tree.cover[0])
    value = 0.0
    for count, leaf in zip(tree.leaf_cover.tolist(), tree.leaf_value.tolist(), strict=True):
        value += (count / total) * leaf
    return value


def build_tables(ensemble: TreeEnsemble) -> TreeTables:
    """Flat arrays for the kernel; raises ExplainUnavailable when covers are missing or zero."""
    if not ensemble.has_covers:
        raise ExplainUnavailable(NO_COVERS)
    split = [t for t in ensemble.trees if t.num_nodes]
    for tree in split:
        assert tree.cover is not None
        if not tree.cover[0] > 0:
            raise ExplainUnavailable("a tree's root has zero cover: TreeSHAP is undefined for it")

    def cat(arrays: list[np.ndarray], dtype: type) -> np.ndarray:
        return np.concatenate([np.zeros(0, dtype), *arrays]).astype(dtype)

    expected = ensemble.base_score
    for tree in ensemble.trees:
        expected += tree_expected_value(tree)
    nodes = [t.num_nodes for t in split]
    leaves = [t.num_leaves for t in split]
    return TreeTables(
        num_features=ensemble.num_features,
        split_feature=cat([t.split_feature for t in split], np.int64),
        threshold=cat([t.threshold for t in split], np.float64),
        left=cat([t.left for t in split], np.int64),
        right=cat([t.right for t in split], np.int64),
        default_left=cat([t.default_left for t in split], np.bool_),
        missing_zero=cat(
            [
                t.missing_zero if t.missing_zero is not None else np.zeros(t.num_nodes, bool)
                for t in split
            ],
            np.bool_,
        ),
        cover=cat([t.cover for t in split if t.cover is not None], np.float64),
        leaf_cover=cat([t.leaf_cover for t in split if t.leaf_cover is not None], np.float64),
        leaf_value=cat([t.leaf_value for t in split], np.float64),
        node_offset=np.concatenate([[0], np.cumsum(nodes, dtype=np.int64)]).astype(np.int64),
        leaf_offset=np.concatenate([[0], np.cumsum(leaves, dtype=np.int64)]).astype(np.int64),
        max_depth=max((tree_depth(t) for t in split), default=0),
        expected_value=float(expected),
    )
