"""RandPair ratios from explored answers, and theta from them with EM's tail."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from trainer.clicks.propensity import estimate_from_dataset
from trainer.clicks.randpair import randpair_ratios
from trainer.data.dataset import RankingDataset

DOCS = 6


def test_the_ratio_of_a_hand_counted_log() -> None:
    # Three lists of 3: two unexplored, one explored at 3 (its first and third swapped).
    positions = np.tile([1, 2, 3], 3)
    clicks = np.array([1, 0, 0, 1, 0, 1, 0, 0, 1])
    offsets = np.array([0, 3, 6, 9])
    explored = np.array([0, 0, 3])
    ratios = randpair_ratios(positions, clicks, offsets, explored, min_clicks=1)
    # A (explored, at 3) = 1, C (explored, at 1) = 0; D (plain, at 3) = 1/2, B (plain, at 1) = 1.
    assert ratios.theta[0] == 1.0 and np.isnan(ratios.theta[1])  # nobody explored at 2
    assert ratios.theta[2] == pytest.approx((1 + 0.5) / (1 + 0))
    assert ratios.answers.tolist() == [0, 0, 1] and ratios.clicks.tolist() == [0, 0, 1]
    assert ratios.estimated_prefix() == 1


def confounded_log(
    share: float, lists: int, seed: int, hidden_scale: float = 1.0
) -> tuple[RankingDataset, np.ndarray]:
    """One fixed ranker over 200 head queries that knows relevance the features lack (unless
    `hidden_scale` is 0); a `share` of answers explored RandPair-style; PBM clicks with
    theta_k = 1/k."""
    rng = np.random.default_rng(seed)
    signal = rng.normal(size=(200, DOCS))
    hidden = hidden_scale * rng.normal(size=(200, DOCS))
    relevance = 1 / (1 + np.exp(-(1.5 * signal + hidden - 1.5)))
    ranked = np.argsort(-(signal + hidden), axis=1)
    q = rng.integers(0, 200, lists)
    order = ranked[q]
    explored = np.where(rng.random(lists) < share, rng.integers(2, DOCS + 1, lists), 0)
    rows = np.flatnonzero(explored)
    k = explored[rows] - 1
    order[rows, 0], order[rows, k] = order[rows, k], order[rows, 0]
    theta = 1 / np.arange(1, DOCS + 1)
    clicks = rng.random((lists, DOCS)) < theta * relevance[q[:, None], order]
    features = np.stack([signal[q[:, None], order], np.zeros((lists, DOCS))], axis=2)
    data = RankingDataset(
        features=np.ascontiguousarray(features.reshape(-1, 2), dtype=np.float32),
        labels=clicks.ravel().astype(np.float64),
        group_offsets=np.arange(0, lists * DOCS + 1, DOCS, dtype=np.int64),
        query_ids=np.array([f"r{i}" for i in range(lists)], dtype=object),
        positions=np.tile(np.arange(1, DOCS + 1), lists),
        explored=explored.astype(np.int64),
    )
    return data, theta


def test_explored_answers_recover_theta_where_em_alone_cannot() -> None:
    data, theta = confounded_log(0.1, 30_000, seed=0)
    alone = estimate_from_dataset(replace(data, explored=None)).theta[:DOCS]
    both = estimate_from_dataset(data)
    assert both.method == "randpair+pbm-em/regression"
    assert both.randpair is not None and both.randpair["positions"] == DOCS
    assert both.randpair["em_consistent"] is False
    error = np.abs(both.theta[:DOCS] - theta) / theta
    error_alone = np.abs(alone - theta) / theta
    assert error[1:].mean() < 0.1 < 0.3 < error_alone[1:].mean()
    assert np.all(np.diff(both.theta) <= 0) and both.theta[0] == 1.0


def test_without_explored_answers_the_estimate_is_em_alone() -> None:
    data, _ = confounded_log(0.0, 3_000, seed=1)
    estimate = estimate_from_dataset(data)
    assert estimate.method == "pbm-em/regression" and estimate.randpair is None
    assert "randpair" not in estimate.to_json()


def test_positions_past_the_explored_ones_keep_ems_shape_joined_at_the_last() -> None:
    data, _ = confounded_log(0.1, 20_000, seed=2)
    capped = data.explored.copy()
    capped[capped > 3] = 0  # exploration depth 3
    plain = replace(data, explored=None)
    em = estimate_from_dataset(plain).theta
    both = estimate_from_dataset(replace(data, explored=capped))
    assert both.randpair is not None and both.randpair["positions"] == 3
    tail = both.theta[3:] / both.theta[2]
    np.testing.assert_allclose(tail, em[3:] / em[2], rtol=1e-9)


def test_too_few_clicks_leave_a_position_to_em() -> None:
    data, _ = confounded_log(0.002, 3_000, seed=3)
    estimate = estimate_from_dataset(data)
    assert estimate.randpair is not None and estimate.randpair["positions"] < 2
    assert estimate.method == "pbm-em/regression"
    assert sum(estimate.randpair["explored_answers"]) == int((data.explored > 0).sum())


def test_em_is_kept_where_the_swaps_agree_with_it() -> None:
    """A ranker that knows nothing the features lack: EM is unbiased, and less noisy than the
    ratios of a few explored answers."""
    data, _ = confounded_log(0.05, 10_000, seed=0, hidden_scale=0.0)
    estimate = estimate_from_dataset(data)
    alone = estimate_from_dataset(replace(data, explored=None))
    assert estimate.randpair is not None and estimate.randpair["em_consistent"] is True
    assert estimate.method == "pbm-em/regression"
    np.testing.assert_array_equal(estimate.theta, alone.theta)
    assert estimate.randpair["chi_square"] < 15.09  # chi-square, 5 dof, 1 %


def test_the_standard_errors_cover_the_truth() -> None:
    inside = 0
    for seed in range(10):
        data, theta = confounded_log(0.05, 10_000, seed)
        clicks = (data.labels > 0).astype(np.int8)
        assert data.explored is not None
        ratios = randpair_ratios(data.positions, clicks, data.group_offsets, data.explored, 10)
        z = (ratios.theta[1:4] - theta[1:4]) / ratios.se[1:4]
        inside += int((np.abs(z) < 1.96).sum())
    assert inside >= 24  # of 30, 95 % expected
