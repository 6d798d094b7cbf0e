"""The workers' share of validation: every partition scored by exactly one training worker,
and NDCG@k from running per-round scores equal to NDCG@k of the model's own predictions."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from trainer.data.dataset import RankingDataset
from trainer.engines.dask_validation import ValidationPlan, WorkerValidation, assign_partitions
from trainer.metrics.ndcg import ndcg_per_query


def _plan(rows: list[int], holders: list[list[str]], eval_at: int = 10) -> ValidationPlan:
    keys = [(("x", i), ("y", i), ("q", i)) for i in range(len(rows))]
    return ValidationPlan(keys=keys, rows=rows, holders=holders, eval_at=eval_at, empty_value=1.0)


def test_partitions_stay_where_they_are_held_when_a_training_worker_holds_them() -> None:
    plan = _plan([300, 200, 100, 50], [["tcp://a"], ["tcp://b"], ["tcp://a"], ["tcp://b"]])
    assert assign_partitions(plan, ["tcp://b", "tcp://a"]) == {
        "tcp://a": [0, 2],
        "tcp://b": [1, 3],
    }


def test_partitions_of_workers_not_training_go_to_the_least_loaded_exactly_once() -> None:
    plan = _plan([400, 300, 200, 100], [["tcp://c"], ["tcp://a", "tcp://c"], [], ["tcp://c"]])
    out = assign_partitions(plan, ["tcp://a", "tcp://b"])
    # 0 to a (tie: name order), 1 where it is held (a), 2 and 3 to b (the least loaded).
    assert out == {"tcp://a": [0, 1], "tcp://b": [2, 3]}
    assert sorted(i for parts in out.values() for i in parts) == [0, 1, 2, 3]
    # Every worker computes the same split whatever order it lists the workers in.
    assert assign_partitions(plan, ["tcp://b", "tcp://a"]) == out


def test_running_scores_give_the_ndcg_of_the_model_after_every_round(
    demo_train: RankingDataset, demo_valid: RankingDataset
) -> None:
    lgb = pytest.importorskip("lightgbm")
    params = {"objective": "lambdarank", "num_leaves": 7, "verbose": -1, "num_threads": 1}
    train = lgb.Dataset(demo_train.features, demo_train.labels, group=demo_train.group_sizes)
    booster = lgb.train(params, train, num_boost_round=6)
    # Two partitions of whole queries, as the workers hold them (pandas blocks).
    sizes = demo_valid.group_sizes
    cut = len(sizes) // 2
    rows = int(sizes[:cut].sum())
    blocks = [
        (
            pd.DataFrame(demo_valid.features[a:b]),
            pd.Series(demo_valid.labels[a:b]),
            pd.Series(q),
        )
        for (a, b), q in (((0, rows), sizes[:cut]), ((rows, demo_valid.num_docs), sizes[cut:]))
    ]
    plan = _plan([rows, demo_valid.num_docs - rows], [[], []], eval_at=5)
    validation = WorkerValidation(plan, blocks)
    for iteration in (0, 1, 3, 5):  # a skipped round's trees are added too
        total, count = validation.after_round(booster, iteration, threads=1)
        scores = booster.predict(demo_valid.features, num_iteration=iteration + 1, raw_score=True)
        expected = ndcg_per_query(scores, demo_valid.labels, demo_valid.group_offsets, 5)
        assert count == demo_valid.num_queries
        assert total == pytest.approx(float(expected.sum()), abs=1e-9)
    assert np.all(np.isfinite(validation.parts[0].scores))
