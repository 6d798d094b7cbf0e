from pathlib import Path

import numpy as np
import pytest

from app.scoring.reference import predict, tree_leaf_index
from trainer.data.dataset import RankingDataset
from trainer.data.loader import load_dataset
from trainer.lambdamart import IterationLog, LambdaMARTParams, train
from trainer.metrics.ndcg import mean_ndcg

DEMO = Path(__file__).resolve().parents[3] / "trainer" / "demo_data"


def _synthetic(n_queries=60, per_query=15, n_features=5, seed=0, nan_rate=0.1):
    rng = np.random.default_rng(seed)
    n = n_queries * per_query
    x = rng.normal(size=(n, n_features)).astype(np.float32)
    relevance = x[:, 0] + 0.5 * x[:, 1] + rng.normal(size=n) * 0.3
    labels = np.digitize(relevance, [0.0, 1.0, 2.0]).astype(np.float64)
    x[rng.random(x.shape) < nan_rate] = np.nan
    offsets = np.arange(0, n + 1, per_query, dtype=np.int64)
    return RankingDataset(x, labels, offsets, np.arange(n_queries))


@pytest.fixture(scope="module")
def demo():
    train_set = load_dataset(DEMO / "rank.train")
    return train_set, load_dataset(DEMO / "rank.test", num_features=train_set.num_features)


def test_export_scores_equal_training_scores():
    data = _synthetic()
    params = LambdaMARTParams(num_trees=15, num_leaves=7, min_data_in_leaf=5, bagging_fraction=0.7)
    result = train(data, params)
    assert len(result.ensemble.trees) == result.best_iteration == 15
    assert result.ensemble.base_score == 0.0 and result.ensemble.meta["engine"] == "native"
    assert result.ensemble.meta["params"]["num_leaves"] == 7
    exported = predict(result.ensemble, data.features)
    np.testing.assert_allclose(exported, result.train_scores, rtol=1e-9, atol=1e-12)
    last = result.history[-1]
    expected = mean_ndcg(result.train_scores, data.labels, data.group_offsets, 10)
    assert last.train_ndcg == pytest.approx(expected, rel=1e-12)
    assert result.history[0].train_ndcg < last.train_ndcg
    for tree in result.ensemble.trees:
        tree.validate(data.num_features)
        counts = np.bincount(tree_leaf_index(tree, data.features), minlength=tree.num_leaves)
        assert tree.num_leaves <= 7 and counts.min() > 0


def test_same_seed_same_model_other_seed_other_model():
    data = _synthetic(nan_rate=0.2)
    params = LambdaMARTParams(
        num_trees=8, num_leaves=6, min_data_in_leaf=5, bagging_fraction=0.6, feature_fraction=0.6
    )
    first = train(data, params).ensemble.to_json_bytes()
    assert train(data, params).ensemble.to_json_bytes() == first
    single = train(data, params.model_copy(update={"threads": 1})).ensemble
    assert single.to_json_bytes().replace(b'"threads":1', b'"threads":0') == first
    other = train(data, params.model_copy(update={"seed": 1})).ensemble.to_json_bytes()
    assert other != first


def test_early_stopping_keeps_the_best_iteration():
    data = _synthetic(n_queries=40, seed=1)
    valid = _synthetic(n_queries=20, seed=2)
    seen: list[IterationLog] = []
    params = LambdaMARTParams(
        num_trees=300, num_leaves=15, learning_rate=0.5, min_data_in_leaf=2, early_stopping_rounds=5
    )
    result = train(data, params, valid, on_iteration=seen.append)
    assert seen == result.history
    assert len(result.history) == result.best_iteration + 5 < 300
    valid_ndcg = [log.valid_ndcg for log in result.history]
    assert max(valid_ndcg) == valid_ndcg[result.best_iteration - 1]
    assert len(result.ensemble.trees) == result.best_iteration
    scores = predict(result.ensemble, valid.features)
    assert mean_ndcg(scores, valid.labels, valid.group_offsets, 10) == pytest.approx(
        max(valid_ndcg), rel=1e-12
    )
    np.testing.assert_allclose(
        predict(result.ensemble, data.features), result.train_scores, rtol=1e-9, atol=1e-12
    )
    assert [log.iteration for log in result.history] == list(range(1, len(seen) + 1))
    assert result.total_seconds >= result.lambda_seconds > 0


def test_valid_with_other_width_is_rejected():
    with pytest.raises(ValueError, match="features"):
        train(_synthetic(), LambdaMARTParams(num_trees=1), _synthetic(n_features=4))


def test_demo_quality_comparable_to_lightgbm(demo):
    import lightgbm as lgb

    train_set, test_set = demo
    # One thread each: on a busy machine two OpenMP teams spinning against each other are slow.
    params = LambdaMARTParams(
        num_trees=60, num_leaves=31, learning_rate=0.1, min_data_in_leaf=20, threads=1
    )
    result = train(train_set, params)
    native = mean_ndcg(
        predict(result.ensemble, test_set.features), test_set.labels, test_set.group_offsets, 10
    )
    booster = lgb.train(
        {
            "objective": "lambdarank",
            "num_leaves": 31,
            "learning_rate": 0.1,
            "min_data_in_leaf": 20,
            "verbose": -1,
            "num_threads": 1,
        },
        lgb.Dataset(train_set.features, train_set.labels, group=np.diff(train_set.group_offsets)),
        60,
    )
    reference = mean_ndcg(
        booster.predict(test_set.features), test_set.labels, test_set.group_offsets, 10
    )
    assert native >= reference - 0.02


def test_a_feature_never_missing_in_training_reads_missing_as_zero(demo) -> None:
    """The bundled LETOR data leaves zeros out (SVMlight), and a /rerank request that leaves a
    feature out sends it missing: unseen NaN went to the larger child, so the demo model
    scored a document differently served than in `ltr evaluate` (the ranking changed). As in
    LightGBM, a feature with no missing value in training reads one as 0."""
    train_set, test_set = demo
    params = LambdaMARTParams(num_trees=20, num_leaves=15, min_data_in_leaf=20)
    model = train(train_set, params).ensemble
    dense = test_set.features
    absent = np.where(dense == 0.0, np.float32(np.nan), dense)
    assert np.isnan(absent).sum() > dense.size // 2  # mostly sparse, as the file is
    np.testing.assert_array_equal(predict(model, absent), predict(model, dense))


def test_only_features_never_missing_in_training_read_missing_as_zero() -> None:
    from trainer.lambdamart.binning import fit_bins
    from trainer.lambdamart.tree_learner import unseen_nan_bins

    x = np.array([[-1.0, 1.0], [0.0, np.nan], [2.0, 3.0], [5.0, 0.0]], dtype=np.float32)
    mapper = fit_bins(x, max_bin=8)
    zero_bin = unseen_nan_bins(mapper.transform(x), mapper)
    # Feature 0 was never missing: NaN goes with 0.0's bin; feature 1 keeps what it learned.
    assert zero_bin.tolist() == [int(mapper.transform(np.zeros((1, 2), np.float32))[0, 0]), -1]
