from __future__ import annotations

from dataclasses import replace

import lightgbm as lgb
import numpy as np
import pytest

from app.scoring.reference import predict
from trainer.engines.lightgbm_ranker import (
    EngineError,
    EngineIteration,
    lightgbm_params,
    train_lightgbm,
)
from trainer.lambdamart.params import LambdaMARTParams
from trainer.metrics.ndcg import mean_ndcg

PARAMS = LambdaMARTParams(num_trees=15, num_leaves=15, learning_rate=0.1, threads=1, seed=3)


def test_params_map_to_lightgbm_names() -> None:
    mapped = lightgbm_params(PARAMS, max_query_size=40)
    assert mapped["objective"] == "lambdarank"
    assert (mapped["num_leaves"], mapped["learning_rate"], mapped["num_threads"]) == (15, 0.1, 1)
    assert mapped["deterministic"] is True and mapped["seed"] == 3
    assert mapped["lambdarank_truncation_level"] == 40  # no truncation = every pair
    assert "bagging_freq" not in mapped
    truncated = PARAMS.model_copy(update={"ndcg_truncation": 20, "max_pairs_rank": 10})
    assert lightgbm_params(truncated, 40)["lambdarank_truncation_level"] == 10
    bagged = lightgbm_params(PARAMS.model_copy(update={"bagging_fraction": 0.5}), 40)
    assert (bagged["bagging_fraction"], bagged["bagging_freq"], bagged["bagging_by_query"]) == (
        0.5,
        1,
        True,
    )


def test_trains_converts_and_reports(demo_train, demo_valid) -> None:
    seen: list[EngineIteration] = []
    result = train_lightgbm(demo_train, PARAMS, demo_valid, on_iteration=seen.append)
    assert [log.iteration for log in seen] == list(range(1, 16))
    assert result.best_iteration == 15 and len(result.ensemble.trees) == 15
    booster = lgb.Booster(model_str=result.model_text)
    np.testing.assert_allclose(
        predict(result.ensemble, demo_valid.features),
        booster.predict(demo_valid.features),
        rtol=1e-12,
        atol=1e-12,
    )
    # LightGBM's own valid NDCG@10 is ours on the converted model's scores
    ours = mean_ndcg(
        predict(result.ensemble, demo_valid.features),
        demo_valid.labels,
        demo_valid.group_offsets,
        k=10,
    )
    assert seen[-1].valid_ndcg == pytest.approx(ours, abs=1e-9)
    assert seen[-1].train_ndcg is not None and seen[-1].train_ndcg > ours


def test_deterministic_with_a_seed(demo_train) -> None:
    first = train_lightgbm(demo_train, PARAMS.model_copy(update={"num_trees": 5}))
    second = train_lightgbm(demo_train, PARAMS.model_copy(update={"num_trees": 5}))
    assert first.model_text == second.model_text


def test_early_stopping_keeps_the_best_iteration(demo_train, demo_valid) -> None:
    params = PARAMS.model_copy(
        update={"num_trees": 200, "early_stopping_rounds": 3, "learning_rate": 0.5}
    )
    seen: list[EngineIteration] = []
    result = train_lightgbm(demo_train, params, demo_valid, on_iteration=seen.append)
    assert len(seen) < 200
    assert len(result.ensemble.trees) == result.best_iteration
    best = max(seen, key=lambda log: log.valid_ndcg or 0.0)
    assert result.best_iteration == best.iteration


def test_bad_labels_are_a_clear_error(demo_train) -> None:
    bad = replace(demo_train, labels=demo_train.labels + 0.5)
    with pytest.raises(EngineError, match="LightGBM"):
        train_lightgbm(bad, PARAMS.model_copy(update={"num_trees": 2}))
