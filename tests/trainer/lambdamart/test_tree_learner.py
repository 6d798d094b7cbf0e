import numpy as np
import pytest

from app.artifacts.tree_dump import TreeEnsemble
from app.scoring.reference import predict, tree_leaf_index
from trainer.lambdamart.binning import fit_bins
from trainer.lambdamart.tree_learner import TreeLearner


def _grow(x, grad, hess=None, num_leaves=2, min_data=1, min_hess=0.0, l2=0.0, rows=None):
    x = np.asarray(x, dtype=np.float32).reshape(len(grad), -1)
    mapper = fit_bins(x, max_bin=255)
    bins = mapper.transform(x)
    learner = TreeLearner(bins, mapper, num_leaves, min_data, min_hess, l2)
    hess = np.ones(len(grad)) if hess is None else np.asarray(hess, dtype=np.float64)
    rows = np.arange(len(grad), dtype=np.int32) if rows is None else rows
    feats = np.arange(x.shape[1], dtype=np.int64)
    grown = learner.grow(np.asarray(grad, dtype=np.float64), hess, rows, feats)
    return x, mapper, learner, grown


def test_one_split_computed_by_hand():
    grad = [-1.0, -1.0, -1.0, -1.0, 1.0, 1.0, 1.0, 1.0]
    x = [8.0, 2.0, 4.0, 1.0, 6.0, 5.0, 7.0, 9.0]
    _, mapper, _, grown = _grow(x, grad, hess=[0.5] * 8, l2=1.0)
    tree = grown.to_tree(mapper, grown.leaf_values(0.1, 1.0))
    # Sorted by x (1 2 4 5 6 7 8 9) the lambdas are - - - + + + - +, hessian 0.5 each, l2 = 1.
    # x <= 4: 9/(1.5+1) + 9/(2.5+1) = 6.17 beats x <= 2 (3.0), x <= 7 (0.89), x <= 8 (0.89).
    assert tree.num_leaves == 2
    assert tree.split_feature[0] == 0 and tree.threshold[0] == 4.0
    np.testing.assert_allclose(tree.leaf_value, [0.1 * -3 / 2.5, 0.1 * 3 / 3.5])
    np.testing.assert_allclose(grown.sums[:2], [[-3.0, 1.5], [3.0, 2.5]])


def test_leaf_wise_takes_the_largest_gain_first():
    # Feature 0 separates strong lambdas, feature 1 weak ones within the right side.
    x = np.array([[0, 0], [0, 1], [1, 0], [1, 1], [1, 0], [1, 1]], dtype=np.float32)
    grad = [-5.0, -5.0, 1.0, 2.0, 1.0, 2.0]
    _, mapper, _, grown = _grow(x, grad, num_leaves=3)
    tree = grown.to_tree(mapper, grown.leaf_values(1.0, 0.0))
    assert list(tree.split_feature) == [0, 1]
    assert tree.right[0] == 1  # the second split refines the right child of the root
    np.testing.assert_allclose(np.sort(tree.leaf_value), [-5.0, 1.0, 2.0])


@pytest.mark.parametrize("relevant_side", [True, False])
def test_nan_learns_its_direction(relevant_side):
    # NaN rows all carry positive lambdas, like the real values on one side of the cut.
    values = np.array([np.nan] * 4 + [1, 2, 3, 4, 5, 6, 7, 8], dtype=np.float32)
    low = 1.0 if relevant_side else -1.0
    grad = [1.0] * 4 + [low] * 4 + [-low] * 4
    x, mapper, _, grown = _grow(values, grad)
    tree = grown.to_tree(mapper, grown.leaf_values(1.0, 0.0))
    assert tree.threshold[0] == 4.0
    assert bool(tree.default_left[0]) is relevant_side
    ensemble = TreeEnsemble(num_features=1, trees=[tree])
    scores = predict(ensemble, x)
    assert np.all(scores[:4] > 0) and np.all(scores[:4] == scores[4 if relevant_side else 8])


def test_min_data_in_leaf_and_hessian_are_honoured():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 4)).astype(np.float32)
    grad = rng.normal(size=500)
    for min_data in (1, 30, 120):
        _, mapper, _, grown = _grow(x, grad, num_leaves=31, min_data=min_data)
        counts = grown.leaf_count[: grown.num_leaves]
        assert counts.min() >= min_data and counts.sum() == 500
        tree = grown.to_tree(mapper, grown.leaf_values(1.0, 0.0))
        leaves = tree_leaf_index(tree, x)
        np.testing.assert_array_equal(np.bincount(leaves, minlength=tree.num_leaves), counts)
    hess = np.full(500, 0.01)
    _, _, _, grown = _grow(x, grad, hess=hess, num_leaves=31, min_hess=1.0)
    assert grown.leaf_count[: grown.num_leaves].min() >= 100


def test_subtraction_histograms_match_a_fresh_build_on_a_subset_of_rows():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(3000, 6)).astype(np.float32)
    x[rng.random(x.shape) < 0.05] = np.nan
    grad = x[:, 0] * 2 - np.nan_to_num(x[:, 3]) + rng.normal(size=3000) * 0.1
    rows = np.sort(rng.choice(3000, 2000, replace=False)).astype(np.int32)
    x, mapper, learner, grown = _grow(x, grad, num_leaves=15, min_data=20, rows=rows)
    tree = grown.to_tree(mapper, grown.leaf_values(1.0, 0.0))
    leaves = tree_leaf_index(tree, x[rows])
    for leaf in range(tree.num_leaves):
        members = np.sort(
            learner.order[grown.leaf_start[leaf] : grown.leaf_start[leaf] + grown.leaf_count[leaf]]
        )
        np.testing.assert_array_equal(members, np.sort(rows[leaves == leaf]))
        np.testing.assert_allclose(grown.sums[leaf, 0], grad[members].sum(), atol=1e-9)
