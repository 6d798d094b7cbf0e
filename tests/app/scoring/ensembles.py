"""Hypothesis strategies: random tree ensembles and inputs aimed at their thresholds."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from app.artifacts.tree_dump import ZERO_THRESHOLD, Tree, TreeEnsemble

# Thresholds that stress float32 lowering: not representable in float32, beyond its range,
# subnormal there, signed zeros, infinities.
SPECIAL_THRESHOLDS = [
    0.0, -0.0, 0.1, -0.1, 1.0 / 3.0, 1e-36, -1e-36, 1e-40, 1e-46, 1e39, -1e39,
    3.4028235677973366e38, float(np.float32(0.7)), np.inf, -np.inf,
]  # fmt: skip
SPECIAL_VALUES = [
    np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-36, -1e-36, 1e-45, -1e-45, 1e-30, 1.0, -1.0,
    float(np.finfo(np.float32).max), float(-np.finfo(np.float32).max),
]  # fmt: skip


@st.composite
def trees(draw: st.DrawFn, num_features: int, max_splits: int = 12) -> Tree:
    """A random binary tree in the dump's layout: random shape, features, thresholds, flags."""
    n = draw(st.integers(0, max_splits))
    value = st.floats(-10, 10, allow_nan=False, width=64)
    if n == 0:
        empty = np.zeros(0, dtype=np.int32)
        return Tree(empty, np.zeros(0), empty, empty, np.zeros(0, bool), np.array([draw(value)]))
    children = [[-1, -1] for _ in range(n)]
    open_slots = [(0, 0), (0, 1)]
    for node in range(1, n):
        slot = open_slots.pop(draw(st.integers(0, len(open_slots) - 1)))
        children[slot[0]][slot[1]] = node
        open_slots += [(node, 0), (node, 1)]
    for leaf, (node, side) in enumerate(sorted(open_slots)):
        children[node][side] = ~leaf
    threshold = st.one_of(
        st.sampled_from(SPECIAL_THRESHOLDS), st.floats(-100, 100, allow_nan=False, width=64)
    )
    with_zero = draw(st.booleans())
    return Tree(
        split_feature=np.array(
            draw(st.lists(st.integers(0, num_features - 1), min_size=n, max_size=n)), np.int32
        ),
        threshold=np.array(draw(st.lists(threshold, min_size=n, max_size=n)), np.float64),
        left=np.array([c[0] for c in children], np.int32),
        right=np.array([c[1] for c in children], np.int32),
        default_left=np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool),
        leaf_value=np.array(draw(st.lists(value, min_size=n + 1, max_size=n + 1)), np.float64),
        missing_zero=(
            np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool)
            if with_zero
            else None
        ),
    )


@st.composite
def ensembles(draw: st.DrawFn, max_trees: int = 6) -> TreeEnsemble:
    num_features = draw(st.integers(1, 6))
    forest = draw(st.lists(trees(num_features), min_size=1, max_size=max_trees))
    base = draw(st.floats(-5, 5, allow_nan=False))
    return TreeEnsemble(num_features, forest, base)


def value_pool(ensemble: TreeEnsemble) -> list[float]:
    """Inputs that sit on, just above and just below every threshold, plus special values."""
    pool = list(SPECIAL_VALUES)
    # ±ZERO_THRESHOLD too: the edge of "missing" for missing_zero splits.
    for tree in [*ensemble.trees, None]:
        thresholds = [ZERO_THRESHOLD, -ZERO_THRESHOLD] if tree is None else tree.threshold
        for t in thresholds:
            with np.errstate(over="ignore"):
                t32 = np.float32(t)
            pool += [
                float(t32),
                float(np.nextafter(t32, np.float32(np.inf))),
                float(np.nextafter(t32, np.float32(-np.inf))),
            ]
    return pool


@st.composite
def ensemble_and_rows(draw: st.DrawFn, max_rows: int = 40) -> tuple[TreeEnsemble, np.ndarray]:
    """An ensemble and float32 rows [n, num_features] drawn from its value pool."""
    ensemble = draw(ensembles())
    n = draw(st.integers(1, max_rows))
    cells = n * ensemble.num_features
    pool = value_pool(ensemble)
    picks = draw(st.lists(st.sampled_from(pool), min_size=cells, max_size=cells))
    rows = np.array(picks, dtype=np.float64).astype(np.float32).reshape(n, -1)
    return ensemble, rows
