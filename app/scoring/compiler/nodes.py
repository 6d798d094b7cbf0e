"""Tree dump → the decisions the code generator emits, with thresholds lowered to float32.

The service feeds float32 features, and the reference decides `float64(x) <= t`. For a float32 `x`
that equals `x <= floor32(t)`, where floor32(t) is the largest float32 not above `t`: every float32
`x <= t` is also `<= floor32(t)` (no float32 lies between them), and the converse holds because
floor32(t) <= t. So comparing in float32 against the rounded-down threshold makes exactly the
reference's decisions, infinities included (t above the float32 range rounds to FLT_MAX, which
+inf exceeds just as it exceeds t; t below it rounds to -inf, which only -inf reaches, as in
float64).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app.artifacts.tree_dump import ZERO_THRESHOLD, Tree, TreeEnsemble


def floor_float32(values: np.ndarray) -> np.ndarray:
    """Largest float32 <= each float64 value. values: float64 [n] (no NaN) → float32 [n]."""
    values = np.asarray(values, dtype=np.float64)
    # Overflow to ±inf is the intended result beyond the float32 range, not an error.
    with np.errstate(over="ignore"):
        nearest = values.astype(np.float32)
        below = np.nextafter(nearest, np.float32(-np.inf))
    above = nearest.astype(np.float64) > values
    return np.where(above, below, nearest).astype(np.float32)


# |x| <= ZERO_THRESHOLD in float64 is |x| <= ZERO32 for float32 x, by the thresholds' argument.
ZERO32 = float(floor_float32(np.array([ZERO_THRESHOLD]))[0])


@dataclass(frozen=True)
class LoweredTree:
    """A tree ready for code generation; arrays are indexed by node [n_nodes] or leaf [n_leaves].

    Node i goes left when `x[feature[i]] <= threshold32[i]` (float32 compare), or when x is
    missing and `default_left[i]`. Missing is NaN, or |x| <= ZERO32 where `missing_zero[i]`.
    Children follow the tree dump: >= 0 a node, < 0 the leaf `~child`.
    """

    feature: np.ndarray  # int32 [n_nodes]
    threshold32: np.ndarray  # float32 [n_nodes]
    default_left: np.ndarray  # bool [n_nodes]
    missing_zero: np.ndarray  # bool [n_nodes]
    left: np.ndarray  # int32 [n_nodes]
    right: np.ndarray  # int32 [n_nodes]
    leaf_value: np.ndarray  # float64 [n_leaves]

    @property
    def num_nodes(self) -> int:
        return int(self.feature.shape[0])

    def postorder(self) -> list[int]:
        """Node indices with both children before their parent (iterative: chains can be deep)."""
        order: list[int] = []
        stack = [(0, False)] if self.num_nodes else []
        while stack:
            node, expanded = stack.pop()
            if expanded:
                order.append(node)
                continue
            stack.append((node, True))
            for child in (int(self.right[node]), int(self.left[node])):
                if child >= 0:
                    stack.append((child, False))
        return order


def lower_tree(tree: Tree) -> LoweredTree:
    n = tree.num_nodes
    mz = tree.missing_zero if tree.missing_zero is not None else np.zeros(n, dtype=bool)
    return LoweredTree(
        feature=tree.split_feature.astype(np.int32),
        threshold32=floor_float32(tree.threshold),
        default_left=tree.default_left.astype(bool),
        missing_zero=mz.astype(bool),
        left=tree.left.astype(np.int32),
        right=tree.right.astype(np.int32),
        leaf_value=tree.leaf_value.astype(np.float64),
    )


def lower_ensemble(ensemble: TreeEnsemble) -> list[LoweredTree]:
    """Every tree lowered, in ensemble order (the order the scores are summed in)."""
    for i, tree in enumerate(ensemble.trees):
        tree.validate(ensemble.num_features, f"tree {i}")
    return [lower_tree(t) for t in ensemble.trees]
