"""The native learner's histogram pool is sized by the leaves a tree can reach: --num-leaves
10^8 asked numpy for terabytes before any data decided how many leaves could exist."""

from __future__ import annotations

import numpy as np

from trainer.lambdamart.binning import fit_bins
from trainer.lambdamart.tree_learner import TreeLearner, reachable_leaves


def _learner(num_leaves: int, min_data: int, n: int = 200) -> tuple[TreeLearner, np.ndarray]:
    x = np.random.default_rng(0).random((n, 3)).astype(np.float32)
    mapper = fit_bins(x, max_bin=255)
    return TreeLearner(mapper.transform(x), mapper, num_leaves, min_data, 0.0, 0.0), x


def test_reachable_leaves() -> None:
    assert reachable_leaves(31, 10_000, 20) == 31
    assert reachable_leaves(131_072, 600, 20) == 30
    assert reachable_leaves(100_000_000, 600, 20) == 30
    assert reachable_leaves(31, 10, 20) == 2  # a first split's two leaves at least
    assert reachable_leaves(2, 10, 20) == 2


def test_the_pool_is_sized_by_the_reachable_leaves() -> None:
    learner, _ = _learner(100_000_000, min_data=20)  # was a 2.79 TiB allocation
    assert learner.pool.shape[0] == 10
    assert learner.num_leaves == 10


def test_capped_leaves_grow_the_same_tree() -> None:
    rng = np.random.default_rng(1)
    grad, hess = rng.normal(size=200), np.ones(200)
    rows, feats = np.arange(200, dtype=np.int32), np.arange(3, dtype=np.int64)
    big, _ = _learner(131_072, min_data=5)
    exact, _ = _learner(40, min_data=5)
    a, b = big.grow(grad, hess, rows, feats), exact.grow(grad, hess, rows, feats)
    assert a.num_leaves == b.num_leaves > 2
    np.testing.assert_array_equal(a.nodes[: a.num_leaves - 1], b.nodes[: b.num_leaves - 1])
    np.testing.assert_array_equal(a.sums[: a.num_leaves], b.sums[: b.num_leaves])
