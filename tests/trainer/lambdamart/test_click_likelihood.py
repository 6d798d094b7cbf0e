"""The position-based click model's likelihood as a boosting objective:
trainer.lambdamart.click_likelihood."""

from __future__ import annotations

import json
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
from trainer.lambdamart.click_likelihood import ClickLikelihoodObjective
from trainer.lambdamart.debias_choice import click_objective, unbiased_from_flags
from trainer.lambdamart.params import LambdaMARTParams


def _log_likelihood(scores: np.ndarray, clicks: np.ndarray, t: np.ndarray) -> np.ndarray:
    q = t / (1.0 + np.exp(-scores))
    return clicks * np.log(q) + (1.0 - clicks) * np.log1p(-q)


def _as_dataset(sim) -> RankingDataset:
    """The simulated clicks as click training data with served positions."""
    return RankingDataset(
        features=np.ascontiguousarray(sim.features),
        labels=sim.clicks.astype(np.float64),
        group_offsets=sim.offsets,
        query_ids=np.arange(sim.offsets.size - 1),
        positions=sim.positions,
    )


def _objective(sim, theta: np.ndarray, **options) -> ClickLikelihoodObjective:
    return ClickLikelihoodObjective(
        sim.clicks.astype(np.float64), sim.offsets, sim.positions, theta, **options
    )


def test_gradient_is_the_derivative_of_the_log_likelihood() -> None:
    sim = pbm_clicks(50, docs=8, seed=0)
    objective = _objective(sim, sim.theta)
    scores = np.random.default_rng(1).normal(size=sim.clicks.size) * 2.0
    grad, fisher, _ = objective.compute(scores)
    t = sim.theta[sim.positions - 1]
    c = sim.clicks.astype(np.float64)
    h = 1e-6
    numeric = (_log_likelihood(scores + h, c, t) - _log_likelihood(scores - h, c, t)) / (2 * h)
    np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-9)
    assert np.all(fisher > 0.0)
    # Fisher information = the expected negative second derivative over clicks ~ Bernoulli(q).
    q = t / (1.0 + np.exp(-scores))
    h = 1e-4  # a second difference needs a wider step than a first one (rounding)
    second = [
        (_log_likelihood(scores + h, v, t) - 2 * _log_likelihood(scores, v, t))
        + _log_likelihood(scores - h, v, t)
        for v in (np.ones_like(c), np.zeros_like(c))
    ]
    expected = -(q * second[0] + (1.0 - q) * second[1]) / h**2
    np.testing.assert_allclose(fisher, expected, rtol=1e-3, atol=1e-7)


def test_the_true_model_is_a_stationary_point_and_a_biased_one_is_not() -> None:
    sim = pbm_clicks(8000, docs=10, seed=2)
    true_logit = 2.0 * sim.features[:, 0].astype(np.float64) - 1.0
    grad, fisher, _ = _objective(sim, sim.theta).compute(true_logit)
    # Each position's mean score is ~0 within sampling error (z-score under 4).
    pos = sim.positions - 1
    per_position = np.bincount(pos, grad) / np.sqrt(np.bincount(pos, fisher))
    assert np.all(np.abs(per_position) < 4.0)
    # Believing every position is examined (naive pointwise clicks) makes the truth look too
    # relevant at low positions: the gradient pushes their scores down.
    naive_grad, _, _ = _objective(sim, np.ones(10)).compute(true_logit)
    low = sim.positions > 5
    assert naive_grad[low].sum() / np.sqrt(low.sum()) < -10.0


def test_learned_theta_converges_to_the_examination_curve() -> None:
    sim = pbm_clicks(8000, docs=10, seed=3)
    true_logit = 2.0 * sim.features[:, 0].astype(np.float64) - 1.0
    objective = _objective(sim, np.full(10, 0.5), learn_theta=True)
    for _ in range(300):  # EM on theta alone: the relevance model is held at the truth
        objective.compute(true_logit)
    relative = objective.theta / objective.theta[0]
    np.testing.assert_allclose(relative, sim.theta, rtol=0.1)
    assert objective.description["theta"] == [round(float(t), 6) for t in relative]


def test_boosting_recovers_calibrated_relevance() -> None:
    sim = pbm_clicks(3000, docs=10, seed=4)
    data = _as_dataset(sim)
    params = LambdaMARTParams(num_trees=60, num_leaves=8, min_data_in_leaf=200, threads=1)
    errors = {}
    for name, theta in (("pbm", sim.theta), ("naive", np.ones(10))):
        objective = _objective(sim, theta)
        result = train(data, params, objective=objective)
        assert result.train_scores is not None
        estimate = 1.0 / (1.0 + np.exp(-result.train_scores))
        errors[name] = float(np.mean(np.abs(estimate - sim.relevance)))
    assert errors["pbm"] < 0.05
    assert errors["naive"] > 3.0 * errors["pbm"]


def test_bad_input() -> None:
    sim = pbm_clicks(4, docs=5, seed=5)
    with pytest.raises(ValueError, match="one entry per document"):
        ClickLikelihoodObjective(sim.clicks, sim.offsets, sim.positions[:-1], sim.theta)
    with pytest.raises(ValueError, match="1-based"):
        ClickLikelihoodObjective(sim.clicks, sim.offsets, sim.positions - 1, sim.theta)
    for theta in (np.zeros(5), np.full(5, 1.5), np.ones((2, 2))):
        with pytest.raises(ValueError, match="theta"):
            ClickLikelihoodObjective(sim.clicks, sim.offsets, sim.positions, theta)


def _click_data(tmp_path: Path) -> tuple[RankingDataset, Path]:
    sim = pbm_clicks(300, docs=8, seed=6)
    data = _as_dataset(sim)
    path = tmp_path / "propensities.json"
    path.write_text(json.dumps({"theta": (sim.theta * 0.8).tolist()}))
    return data, path


def test_flags_and_objective(tmp_path: Path) -> None:
    data, path = _click_data(tmp_path)
    params = LambdaMARTParams(num_trees=2)
    objective = unbiased_from_flags("native", data, params, True, path, "log2", None, "click-model")
    assert isinstance(objective, ClickLikelihoodObjective)
    assert objective.theta[0] == 1.0  # the file's curve, scaled so position 1 is examined
    with pytest.raises(ConfigError, match="--propensities"):
        unbiased_from_flags("native", data, params, True, None, "log2", None, "click-model")
    with pytest.raises(ConfigError, match="log2 only"):
        unbiased_from_flags("native", data, params, True, path, "ctr", None, "click-model")
    with pytest.raises(ConfigError, match="--max-weight"):
        unbiased_from_flags("native", data, params, True, path, "log2", 5.0, "click-model")
    with pytest.raises(DataFormatError, match="needs propensities"):
        click_objective(data, params, None, debias="click-model")


def test_cli_trains_and_records_the_objective(tmp_path: Path) -> None:
    data, path = _click_data(tmp_path)
    write_parquet(data, tmp_path / "train.parquet")
    args = ["train", "--train", str(tmp_path / "train.parquet"), "--out", str(tmp_path / "m")]
    args += ["--num-trees", "5", "--num-leaves", "4", "--json", "--unbiased"]
    args += ["--propensities", str(path), "--debias", "click-model"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = orjson.loads(result.stdout)
    training = load_version(Path(summary["model_dir"])).manifest.training
    assert training["objective"]["lambdas"] == "click_likelihood"
    assert training["objective"]["propensities"] == str(path)


def test_extreme_scores_stay_finite() -> None:
    sim = pbm_clicks(20, docs=5, seed=7)
    scores = np.resize([-800.0, -40.0, 0.0, 40.0, 800.0], sim.clicks.size)
    at_top = (sim.positions == 1) & (sim.clicks == 0)
    scores[at_top] = 800.0
    objective = _objective(sim, sim.theta, learn_theta=True)
    grad, fisher, _ = objective.compute(scores)
    assert np.all(np.isfinite(grad)) and np.all(np.isfinite(fisher)) and np.all(fisher >= 0)
    assert np.all(np.isfinite(objective.theta))
    # An unclicked document at a position that is always examined (theta 1), scored as sure to
    # be clicked: the gradient pushes it down at full strength (-1), not 0 / 0.
    assert at_top.any()
    np.testing.assert_allclose(grad[at_top], -1.0)
