"""NDCG by hand on small lists, and against LightGBM's own ndcg@k evaluation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trainer.metrics.ndcg import mean_ndcg, ndcg_per_query

DEMO = Path(__file__).parents[3] / "trainer" / "demo_data"
LOG2_3 = np.log2(3.0)


def one(
    labels: list[float], scores: list[float], k: int | None = None, empty_value: float = 1.0
) -> float:
    offsets = np.array([0, len(labels)])
    return float(ndcg_per_query(np.array(scores), np.array(labels), offsets, k, empty_value)[0])


def test_by_hand() -> None:
    # Ranked labels 0, 1, 2: DCG = 0 + 1/log2(3) + 3/log2(4); ideal 2, 1, 0: 3 + 1/log2(3).
    expected = (1 / LOG2_3 + 3 / 2) / (3 + 1 / LOG2_3)
    assert one([0, 1, 2], [3, 2, 1]) == pytest.approx(expected, abs=1e-15)
    assert one([2, 1, 0], [3, 2, 1]) == 1.0
    # @1: the top document has label 0 while the ideal's has 2.
    assert one([0, 1, 2], [3, 2, 1], k=1) == 0.0
    # @2: (1/log2 3) / (3 + 1/log2 3).
    assert one([0, 1, 2], [3, 2, 1], k=2) == pytest.approx((1 / LOG2_3) / (3 + 1 / LOG2_3))


def test_ties_keep_input_order() -> None:
    assert one([0, 1], [5, 5]) == pytest.approx((1 / LOG2_3) / 1.0)
    assert one([1, 0], [5, 5]) == 1.0
    assert one([0, 1, 2], [1, 1, 1]) == one([0, 1, 2], [3, 2, 1])


def test_k_larger_than_the_list_is_the_whole_list() -> None:
    assert one([0, 1, 2], [3, 2, 1], k=10) == one([0, 1, 2], [3, 2, 1])


def test_query_without_relevant_documents_uses_empty_value() -> None:
    assert one([0, 0, 0], [1, 2, 3]) == 1.0
    assert one([0, 0, 0], [1, 2, 3], empty_value=0.0) == 0.0
    assert one([0, 0, 0], [1, 2, 3], k=2, empty_value=0.25) == 0.25


def test_several_queries_and_mean() -> None:
    scores = np.array([3.0, 2, 1, 1, 2, 0.5])
    labels = np.array([0.0, 1, 2, 0, 0, 0])
    offsets = np.array([0, 3, 4, 6])
    per_query = ndcg_per_query(scores, labels, offsets)
    assert per_query.dtype == np.float64 and per_query.shape == (3,)
    np.testing.assert_allclose(per_query, [one([0, 1, 2], [3, 2, 1]), 1.0, 1.0])
    assert mean_ndcg(scores, labels, offsets) == pytest.approx(per_query.mean())
    assert mean_ndcg(scores, labels, offsets, empty_value=0.0) == pytest.approx(per_query[0] / 3)


@pytest.mark.parametrize("k", [0, -1, 1.5, True])
def test_bad_cutoff(k: int) -> None:
    with pytest.raises(ValueError, match="cut-off"):
        one([0, 1], [1, 2], k=k)


def test_bad_inputs() -> None:
    with pytest.raises(ValueError, match="2 scores for 3 labels"):
        ndcg_per_query(np.zeros(2), np.zeros(3), np.array([0, 3]))
    with pytest.raises(ValueError, match="at least one document"):
        ndcg_per_query(np.zeros(2), np.zeros(2), np.array([0, 0, 2]))
    with pytest.raises(ValueError, match="start at 0"):
        ndcg_per_query(np.zeros(2), np.zeros(2), np.array([0, 1]))
    with pytest.raises(ValueError, match="integers"):
        ndcg_per_query(np.zeros(2), np.zeros(2), np.array([0.0, 2.0]))


def test_equals_lightgbm_ndcg_at_k() -> None:
    """LightGBM's recorded ndcg@k on two evaluation sets equals ours on its predictions."""
    import lightgbm as lgb

    from trainer.data.letor import read_letor

    train = read_letor(DEMO / "rank.train")
    valid = read_letor(DEMO / "rank.test", num_features=train.num_features)
    train_set = lgb.Dataset(train.features, train.labels, group=train.group_sizes)
    valid_set = lgb.Dataset(
        valid.features, valid.labels, group=valid.group_sizes, reference=train_set
    )
    params = {
        "objective": "lambdarank",
        "metric": "ndcg",
        "eval_at": [1, 3, 5, 10],
        "num_leaves": 7,
        "num_threads": 1,
        "seed": 1,
        "verbose": -1,
    }
    recorded: dict[str, dict[str, list[float]]] = {}
    booster = lgb.train(
        params,
        train_set,
        5,
        valid_sets=[train_set, valid_set],
        valid_names=["train", "valid"],
        callbacks=[lgb.record_evaluation(recorded)],
    )
    for name, data in (("train", train), ("valid", valid)):
        scores = np.asarray(booster.predict(data.features))
        assert np.unique(scores).size < scores.size  # ties exist, so their order is tested too
        for k in (1, 3, 5, 10):
            ours = mean_ndcg(scores, data.labels, data.group_offsets, k)
            assert ours == pytest.approx(recorded[name][f"ndcg@{k}"][-1], abs=1e-9)
    # Three training queries have only label 0: LightGBM scores them 1, as we do by default.
    assert (np.maximum.reduceat(train.labels, train.group_offsets[:-1]) == 0).sum() == 3
