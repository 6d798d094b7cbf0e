"""Position-bias factors learned while boosting: trainer.lambdamart.position_bias_factors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest
from typer.testing import CliRunner

from app.artifacts.store import load_version
from tests.trainer.clicks.conftest import pbm_clicks
from trainer.cli import app
from trainer.config import ConfigError
from trainer.data.dataset import RankingDataset
from trainer.data.errors import DataFormatError
from trainer.data.parquet import write_parquet
from trainer.lambdamart.booster import train
from trainer.lambdamart.debias_choice import click_objective, unbiased_from_flags
from trainer.lambdamart.lambdas import LambdaObjective
from trainer.lambdamart.params import LambdaMARTParams
from trainer.lambdamart.position_bias_factors import PositionBiasObjective


def _random_serves(seed: int, n_queries: int, n: int, theta: np.ndarray):
    """PBM clicks with positions served at random (independent of relevance): labels
    [n_queries * n], positions 1..n, offsets, relevance logits."""
    rng = np.random.default_rng(seed)
    positions = np.concatenate([rng.permutation(n) + 1 for _ in range(n_queries)])
    logit = rng.normal(size=n_queries * n)
    relevant = rng.random(n_queries * n) < 1.0 / (1.0 + np.exp(-(2.0 * logit - 1.0)))
    clicks = relevant & (rng.random(n_queries * n) < theta[positions - 1])
    offsets = np.arange(0, n_queries * n + 1, n, dtype=np.int64)
    return clicks.astype(np.float64), positions, offsets, logit


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra = np.argsort(np.argsort(a)).astype(np.float64)
    rb = np.argsort(np.argsort(b)).astype(np.float64)
    return float(np.corrcoef(ra, rb)[0, 1])


def test_biases_follow_the_examination_curve() -> None:
    theta = 1.0 / np.arange(1, 11)
    clicks, positions, offsets, logit = _random_serves(0, 4000, 10, theta)
    objective = PositionBiasObjective(clicks, offsets, positions, learning_rate=0.5)
    for _ in range(40):  # a fixed relevance model: only the factors move
        objective.compute(logit)
    bias = objective.bias
    assert bias[0] == 0.0
    assert _spearman(bias, np.log(theta)) > 0.95
    assert np.all(bias[1:] < 0.0)
    # Position 10 is examined 10x less than position 1: a clearly larger penalty than at 2.
    assert bias[9] < bias[1] - 0.5
    assert objective.description["position_bias"] == [round(float(b), 6) for b in bias]


def test_equal_positions_give_the_plain_objective() -> None:
    clicks, _, offsets, logit = _random_serves(1, 50, 8, np.ones(8))
    plain = LambdaObjective(clicks, offsets, eval_at=5)
    for served in (1, 4):
        objective = PositionBiasObjective(
            clicks, offsets, np.full(clicks.size, served), learning_rate=1.0, eval_at=5
        )
        scores = logit.copy()
        for _ in range(3):
            lam, hess, ndcg = objective.compute(scores)
            want = plain.compute(scores)
            for got, expected in zip((lam, hess, ndcg), want, strict=True):
                np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-15)
            assert np.all(objective.bias == 0.0)
            scores = scores + 0.3 * lam


def test_lambdas_use_the_bias_and_ndcg_does_not() -> None:
    theta = 1.0 / np.arange(1, 9)
    clicks, positions, offsets, logit = _random_serves(2, 300, 8, theta)
    objective = PositionBiasObjective(clicks, offsets, positions, eval_at=5)
    for _ in range(5):
        objective.compute(logit)
    bias = objective.bias.copy()
    lam, hess, ndcg = objective.compute(logit)
    plain = LambdaObjective(clicks, offsets, eval_at=5)
    want_l, want_h, _ = plain.compute(logit + bias[positions - 1])
    np.testing.assert_allclose(lam, want_l, rtol=1e-12)
    np.testing.assert_allclose(hess, want_h, rtol=1e-12)
    np.testing.assert_allclose(ndcg, plain.compute(logit, with_lambdas=False)[2], rtol=1e-12)
    assert not np.array_equal(bias, objective.bias)  # the pass moved the factors
    # A Newton step from the pass's own sums.
    n_k = np.bincount(positions - 1)
    step = np.bincount(positions - 1, lam) / (np.bincount(positions - 1, hess) + 0.001)
    moved = bias + 0.1 * step
    np.testing.assert_allclose(objective.bias, moved - moved[0], atol=1e-12)
    assert n_k.sum() == clicks.size


def test_shuffle_invariance() -> None:
    theta = 1.0 / np.arange(1, 9)
    clicks, positions, offsets, logit = _random_serves(3, 60, 8, theta)
    rng = np.random.default_rng(3)
    query_order = rng.permutation(60)
    rows = np.concatenate([offsets[q] + rng.permutation(8) for q in query_order])
    one = PositionBiasObjective(clicks, offsets, positions, eval_at=5)
    two = PositionBiasObjective(clicks[rows], offsets, positions[rows], eval_at=5)
    scores = logit.copy()
    for _ in range(4):
        lam1, hess1, ndcg1 = one.compute(scores)
        lam2, hess2, ndcg2 = two.compute(scores[rows])
        np.testing.assert_allclose(lam2, lam1[rows], rtol=1e-10, atol=1e-14)
        np.testing.assert_allclose(hess2, hess1[rows], rtol=1e-10, atol=1e-14)
        np.testing.assert_allclose(ndcg2, ndcg1[query_order], rtol=1e-12)
        np.testing.assert_allclose(two.bias, one.bias, rtol=1e-9, atol=1e-12)
        scores = scores + 0.5 * lam1


def test_regularisation_shrinks_the_factors() -> None:
    theta = 1.0 / np.arange(1, 9)
    clicks, positions, offsets, logit = _random_serves(4, 500, 8, theta)
    free = PositionBiasObjective(clicks, offsets, positions, learning_rate=0.5)
    held = PositionBiasObjective(clicks, offsets, positions, learning_rate=0.5, regularization=5.0)
    for _ in range(20):
        free.compute(logit)
        held.compute(logit)
    assert np.abs(held.bias).sum() < 0.5 * np.abs(free.bias).sum()


def test_bad_input() -> None:
    clicks, positions, offsets, _ = _random_serves(5, 4, 5, np.ones(5))
    with pytest.raises(ValueError, match="one entry per document"):
        PositionBiasObjective(clicks, offsets, positions[:-1])
    with pytest.raises(ValueError, match="1-based"):
        PositionBiasObjective(clicks, offsets, positions - 1)
    with pytest.raises(ValueError, match="learning_rate"):
        PositionBiasObjective(clicks, offsets, positions, learning_rate=0.0)
    with pytest.raises(ValueError, match="regularization"):
        PositionBiasObjective(clicks, offsets, positions, regularization=-1.0)


def _click_dataset(n_queries: int = 300, seed: int = 5) -> RankingDataset:
    sim = pbm_clicks(n_queries, docs=8, seed=seed)
    return RankingDataset(
        features=np.ascontiguousarray(sim.features),
        labels=sim.clicks.astype(np.float64),
        group_offsets=sim.offsets,
        query_ids=np.arange(n_queries),
        positions=sim.positions,
    )


def test_booster_exports_trees_without_the_bias() -> None:
    data = _click_dataset()
    params = LambdaMARTParams(num_trees=8, num_leaves=4, min_data_in_leaf=20, threads=1)
    objective = click_objective(data, params, None, debias="position-bias")
    assert isinstance(objective, PositionBiasObjective)
    result = train(data, params, objective=objective)
    from app.scoring.reference import predict

    exported = np.asarray(predict(result.ensemble, data.features), dtype=np.float64)
    assert result.train_scores is not None
    np.testing.assert_allclose(exported, result.train_scores, rtol=1e-5, atol=1e-5)
    assert objective.bias[1] < 0.0  # the logging ranker's position 2 is examined less
    with pytest.raises(DataFormatError, match="use log2"):
        click_objective(data, params, None, discount="ctr", debias="position-bias")


def test_flags() -> None:
    data = _click_dataset(40)
    params = LambdaMARTParams(num_trees=2)
    flags = ("native", data, params, True, None, "log2", None)
    assert isinstance(unbiased_from_flags(*flags, "position-bias"), PositionBiasObjective)
    with pytest.raises(ConfigError, match="--max-weight"):
        unbiased_from_flags("native", data, params, True, None, "log2", 5.0, "position-bias")
    with pytest.raises(ConfigError, match="log2 only"):
        unbiased_from_flags("native", data, params, True, None, "ctr", None, "position-bias")


def test_cli_flag_is_accepted_and_recorded(tmp_path: Path) -> None:
    write_parquet(_click_dataset(), tmp_path / "train.parquet")
    args = ["train", "--train", str(tmp_path / "train.parquet"), "--out", str(tmp_path / "m")]
    args += ["--num-trees", "4", "--num-leaves", "4", "--json", "--unbiased"]
    result = CliRunner().invoke(app, [*args, "--debias", "position-bias"])
    assert result.exit_code == 0, result.output
    summary = orjson.loads(result.stdout)
    training = load_version(Path(summary["model_dir"])).manifest.training
    assert training["objective"]["lambdas"] == "position_bias_factors"
    bias = training["objective"]["position_bias"]
    assert len(bias) == 8 and bias[0] == 0.0 and min(bias[1:]) < 0.0
