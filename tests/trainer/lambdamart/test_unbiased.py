from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from trainer.data.dataset import RankingDataset
from trainer.data.errors import DataFormatError
from trainer.lambdamart.booster import train
from trainer.lambdamart.lambdas import LambdaObjective
from trainer.lambdamart.lambdas import lambdas_and_hessians as plain_lambdas
from trainer.lambdamart.params import LambdaMARTParams
from trainer.lambdamart.unbiased import (
    UnbiasedObjective,
    click_objective,
    fit_power_discount,
    ipw_weights,
    lambdas_and_hessians,
    power_discount,
)


def _reference(scores, labels, weights, disc, sigma=1.0):
    """The definition for one query: every pair with different labels, delta of the weighted
    DCG under `disc` when the two swap, normalised by the unweighted ideal DCG."""
    n = len(scores)
    order = np.argsort(-scores, kind="stable")
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    gains = 2.0**labels - 1.0
    ideal = float(np.sum(np.sort(gains)[::-1] * disc[:n]))
    lam, hess = np.zeros(n), np.zeros(n)
    for i in range(n):
        for j in range(n):
            if labels[i] <= labels[j]:
                continue
            delta = abs(gains[i] * weights[i] - gains[j] * weights[j])
            delta *= abs(disc[rank[i]] - disc[rank[j]]) / ideal
            rho = 1.0 / (1.0 + np.exp(sigma * (scores[i] - scores[j])))
            lam[i] += sigma * rho * delta
            lam[j] -= sigma * rho * delta
            hess[i] += sigma**2 * delta * rho * (1 - rho)
            hess[j] += sigma**2 * delta * rho * (1 - rho)
    return lam, hess


def _queries(seed: int = 0, n_queries: int = 6, n: int = 8):
    rng = np.random.default_rng(seed)
    scores = rng.normal(size=n_queries * n)
    labels = (rng.random(n_queries * n) < 0.3).astype(np.float64)
    labels[::n] = 1.0  # every query has a click
    labels[1::n] = 0.0  # and a non-click
    labels[2::n] *= 2.0  # and some purchases
    weights = rng.uniform(1.0, 8.0, size=labels.size)
    return scores, labels, weights, np.arange(0, n_queries * n + 1, n, dtype=np.int64)


def test_no_weights_no_discount_is_plain_lambdarank() -> None:
    scores, labels, _, offsets = _queries()
    plain = LambdaObjective(labels, offsets, 1.5, eval_at=5)
    ours = UnbiasedObjective(labels, offsets, sigma=1.5, eval_at=5)
    for a, b in zip(plain.compute(scores), ours.compute(scores), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("discount", [None, power_discount(1.3, 8)])
def test_matches_the_definition(discount: np.ndarray | None) -> None:
    scores, labels, weights, offsets = _queries(seed=2)
    lam, hess = lambdas_and_hessians(scores, labels, offsets, weights=weights, discount=discount)
    disc = 1.0 / np.log2(np.arange(8) + 2.0) if discount is None else discount
    for lo, hi in itertools.pairwise(offsets):
        want_l, want_h = _reference(scores[lo:hi], labels[lo:hi], weights[lo:hi], disc)
        np.testing.assert_allclose(lam[lo:hi], want_l, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(hess[lo:hi], want_h, rtol=1e-10, atol=1e-12)


def test_single_click_weight_is_not_normalised_away() -> None:
    labels, offsets, scores = np.array([0.0, 1.0, 0.0]), np.array([0, 3]), np.zeros(3)
    base, base_h = plain_lambdas(scores, labels, offsets)
    lam, hess = lambdas_and_hessians(scores, labels, offsets, weights=np.full(3, 4.0))
    np.testing.assert_allclose(lam, 4.0 * base)
    np.testing.assert_allclose(hess, 4.0 * base_h)


def test_reports_unweighted_ndcg() -> None:
    scores, labels, weights, offsets = _queries(seed=3)
    plain = LambdaObjective(labels, offsets, eval_at=5).compute(scores)[2]
    ours = UnbiasedObjective(labels, offsets, weights, power_discount(2.0, 8), eval_at=5)
    np.testing.assert_array_equal(ours.compute(scores)[2], plain)
    lam, hess, ndcg = ours.compute(scores, with_lambdas=False)
    assert not lam.any() and not hess.any()
    np.testing.assert_array_equal(ndcg, plain)


def test_truncation_and_short_discount() -> None:
    scores, labels, _weights, offsets = _queries(seed=4)
    short = np.array([1.0, 0.5, 0.4])  # ranks past 3 get 0.4
    lam, _ = lambdas_and_hessians(scores, labels, offsets, ndcg_truncation=3, discount=short)
    disc = np.array([1.0, 0.5, 0.4, 0, 0, 0, 0, 0])  # truncated at 3
    want, _ = _reference(scores[:8], labels[:8], np.ones(8), disc)
    # The normaliser is the ideal DCG@3 under the same discount.
    ideal3 = float(np.sum(np.sort(2.0 ** labels[:8] - 1)[::-1][:3] * short))
    ideal_all = float(np.sum(np.sort(2.0 ** labels[:8] - 1)[::-1] * disc))
    np.testing.assert_allclose(lam[:8], want * ideal_all / ideal3, rtol=1e-10)


def test_ipw_weights() -> None:
    theta = np.array([1.0, 0.5, 0.25])
    w = ipw_weights(np.array([1, 2, 3, 9]), theta)
    np.testing.assert_array_equal(w, [1.0, 2.0, 4.0, 4.0])
    np.testing.assert_array_equal(ipw_weights(np.array([3]), theta, max_weight=3.0), [3.0])
    with pytest.raises(ValueError, match="1-based"):
        ipw_weights(np.array([0]), theta)
    with pytest.raises(ValueError, match="positive"):
        ipw_weights(np.array([1]), np.array([1.0, 0.0]))


def test_fit_power_discount() -> None:
    k = np.arange(1, 21)
    assert fit_power_discount(0.3 * k**-1.4) == pytest.approx(1.4)
    noisy = 0.3 * k**-0.8 * np.where(k % 2 == 0, 1.05, 0.95)
    assert fit_power_discount(noisy, counts=np.full(20, 100)) == pytest.approx(0.8, abs=0.05)
    with pytest.raises(ValueError, match="position 1"):
        fit_power_discount(np.array([np.nan, 0.1, 0.05]))


def test_bad_discount_and_weights() -> None:
    _scores, labels, _, offsets = _queries()
    with pytest.raises(ValueError, match="non-increasing"):
        UnbiasedObjective(labels, offsets, discount=np.array([0.5, 1.0]))
    with pytest.raises(ValueError, match="one per document"):
        UnbiasedObjective(labels, offsets, weights=np.ones(3))


def test_booster_trains_with_the_objective() -> None:
    rng = np.random.default_rng(0)
    features = rng.normal(size=(400, 3)).astype(np.float32)
    labels = (features[:, 0] + 0.3 * rng.normal(size=400) > 0.8).astype(np.float64)
    data = RankingDataset(features, labels, np.arange(0, 401, 20, dtype=np.int64), np.arange(20))
    params = LambdaMARTParams(num_trees=5, num_leaves=4, min_data_in_leaf=5, threads=1)
    plain = train(data, params)
    same = train(data, params, objective=UnbiasedObjective(labels, data.group_offsets, eval_at=10))
    assert len(plain.ensemble.trees) == len(same.ensemble.trees)
    for a, b in zip(plain.ensemble.trees, same.ensemble.trees, strict=True):
        np.testing.assert_array_equal(a.leaf_value, b.leaf_value)
    weighted = UnbiasedObjective(labels, data.group_offsets, weights=rng.uniform(1, 5, 400))
    other = train(data, params, objective=weighted)
    assert not np.array_equal(
        other.ensemble.trees[0].leaf_value, plain.ensemble.trees[0].leaf_value
    )


def _click_data(positions: bool) -> RankingDataset:
    labels = np.array([0.0, 1.0, 0.0, 1.0, 0.0, 0.0])
    return RankingDataset(
        np.zeros((6, 1), dtype=np.float32),
        labels,
        np.array([0, 3, 6]),
        np.array(["r1", "r2"]),
        source="clicks.parquet",
        positions=np.array([1, 2, 3, 1, 2, 3]) if positions else None,
    )


def test_click_objective_from_a_propensity_file(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"theta": [1.0, 0.5, 0.25], "ctr": [0.3, 0.15, None]}))
    params = LambdaMARTParams()
    data = _click_data(positions=True)
    ctr = click_objective(data, params, path, discount="ctr")
    np.testing.assert_allclose(ctr.disc_pairs, [1.0, 0.5, 2.0 ** -np.log2(3)])
    np.testing.assert_allclose(ctr.pair_gains, [0, 2, 0, 1, 0, 0])
    theta = click_objective(data, params, path, discount="theta", max_weight=1.5)
    np.testing.assert_allclose(theta.disc_pairs, [1.0, 0.5, 0.25])
    np.testing.assert_allclose(theta.pair_gains, [0, 1.5, 0, 1, 0, 0])
    plain = click_objective(data, params, path)
    np.testing.assert_allclose(plain.disc_pairs, 1.0 / np.log2([2.0, 3.0, 4.0]))


def test_click_objective_errors(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"theta": [1.0, 0.5]}))
    params = LambdaMARTParams()
    with pytest.raises(DataFormatError, match=r"clicks\.parquet: --unbiased needs the served"):
        click_objective(_click_data(positions=False), params, path)
    with pytest.raises(DataFormatError, match="no 'ctr' list"):
        click_objective(_click_data(positions=True), params, path, discount="ctr")
