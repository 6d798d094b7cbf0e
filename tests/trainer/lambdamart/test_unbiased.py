from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from trainer.data.dataset import RankingDataset
from trainer.data.errors import DataFormatError
from trainer.lambdamart.booster import train
from trainer.lambdamart.debias_choice import click_objective, unbiased_from_flags
from trainer.lambdamart.lambdas import LambdaObjective
from trainer.lambdamart.lambdas import lambdas_and_hessians as plain_lambdas
from trainer.lambdamart.pairwise_debias import PairwiseDebiasObjective, position_ratios
from trainer.lambdamart.params import LambdaMARTParams
from trainer.lambdamart.position_bias_factors import PositionBiasObjective
from trainer.lambdamart.unbiased import (
    UnbiasedObjective,
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
    ctr = click_objective(data, params, path, discount="ctr", debias="ipw")
    np.testing.assert_allclose(ctr.disc_pairs, [1.0, 0.5, 2.0 ** -np.log2(3)])
    np.testing.assert_allclose(ctr.pair_gains, [0, 2, 0, 1, 0, 0])
    theta = click_objective(data, params, path, discount="theta", max_weight=1.5, debias="ipw")
    np.testing.assert_allclose(theta.disc_pairs, [1.0, 0.5, 0.25])
    np.testing.assert_allclose(theta.pair_gains, [0, 1.5, 0, 1, 0, 0])
    plain = click_objective(data, params, path, debias="ipw")
    np.testing.assert_allclose(plain.disc_pairs, 1.0 / np.log2([2.0, 3.0, 4.0]))


def test_click_objective_errors(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"theta": [1.0, 0.5]}))
    params = LambdaMARTParams()
    with pytest.raises(DataFormatError, match=r"clicks\.parquet: --unbiased needs the served"):
        click_objective(_click_data(positions=False), params, path, debias="ipw")
    with pytest.raises(DataFormatError, match="no 'ctr' list"):
        click_objective(_click_data(positions=True), params, path, discount="ctr", debias="ipw")


# Pairwise debiasing (Hu et al. 2019): trainer.lambdamart.pairwise_debias.


def _pbm_clicks(seed: int, n_queries: int, n: int, theta: np.ndarray):
    """Clicks under the position-based model, one relevant document per query, positions
    served at random (independent of relevance)."""
    rng = np.random.default_rng(seed)
    positions = np.concatenate([rng.permutation(n) + 1 for _ in range(n_queries)])
    relevant = np.zeros(n_queries * n, dtype=bool)
    relevant[::n] = True  # first in input order: with tied scores each pair's loss is alike
    clicks = relevant & (rng.random(n_queries * n) < theta[positions - 1])
    offsets = np.arange(0, n_queries * n + 1, n, dtype=np.int64)
    return clicks.astype(np.float64), positions, offsets, relevant


def _expected_ratios(theta: np.ndarray, power: float) -> tuple[np.ndarray, np.ndarray]:
    """The fixed point of the t+/t- updates in expectation for a constant model on
    _pbm_clicks: every pair then has the same mean loss (one click per list, so the same
    normaliser), a click at k (chance theta_k / n) pairs with a non-click at every other
    position m, and a non-click at k with the click at any other position."""
    t_plus, t_minus = np.ones_like(theta), np.ones_like(theta)
    for _ in range(200):
        plus = theta * (np.sum(1 / t_minus) - 1 / t_minus)
        minus = np.sum(theta / t_plus) - theta / t_plus
        t_plus = (plus / plus[0]) ** (1 / (power + 1))
        t_minus = (minus / minus[0]) ** (1 / (power + 1))
    return t_plus, t_minus


def test_pairwise_ratios_recover_known_position_ratios() -> None:
    theta = 1.0 / np.arange(1, 9)
    clicks, positions, offsets, relevant = _pbm_clicks(0, 20000, 8, theta)
    # The click rate each position actually got, so that only the losses' noise is left.
    seen = np.bincount(positions[clicks > 0])[1:] / np.bincount(positions[relevant])[1:]
    for power in (1.0, 0.5):
        objective = PairwiseDebiasObjective(clicks, offsets, positions, power=power)
        for _ in range(6):  # t+ and t- divide each other's sums: let the joint fit settle
            objective.compute(np.zeros(clicks.size))
        want_plus, want_minus = _expected_ratios(seen, power)
        assert objective.t_plus[0] == 1.0 and objective.t_minus[0] == 1.0
        np.testing.assert_allclose(objective.t_plus, want_plus, rtol=0.04)
        np.testing.assert_allclose(objective.t_minus, want_minus, rtol=0.01)
        # The click side follows the examination curve: about theta_k^(1/(p+1)).
        np.testing.assert_allclose(objective.t_plus, theta ** (1 / (power + 1)), rtol=0.1)


def test_pairwise_with_unit_ratios_is_the_unbiased_objective() -> None:
    scores, labels, _, offsets = _queries(seed=5)
    positions = np.tile(np.arange(1, 9), 6)
    for discount, trunc in ((None, None), (power_discount(1.2, 8), 5)):
        plain = UnbiasedObjective(labels, offsets, None, discount, 1.3, trunc, eval_at=5)
        ours = PairwiseDebiasObjective(labels, offsets, positions, discount, 1.3, trunc, eval_at=5)
        for a, b in zip(plain.compute(scores), ours.compute(scores), strict=True):
            np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-14)
        assert not np.array_equal(ours.t_plus, np.ones(8))  # learned after the first pass
        fixed = PairwiseDebiasObjective(
            labels, offsets, positions, discount, 1.3, trunc, learn=False
        )
        for _ in range(2):
            np.testing.assert_allclose(
                fixed.compute(scores)[0], plain.compute(scores)[0], rtol=1e-12, atol=1e-14
            )
        np.testing.assert_array_equal(fixed.t_plus, np.ones(8))


def test_pairwise_weights_each_pair_by_both_positions() -> None:
    # One click at position 2 over non-clicks at positions 1 and 3: each pair's lambda is the
    # plain one divided by t+_2 t-_{pos j}.
    labels, offsets = np.array([0.0, 1.0, 0.0]), np.array([0, 3])
    positions, scores = np.array([1, 2, 3]), np.array([0.3, 0.0, -0.2])
    t_plus, t_minus = np.array([1.0, 0.5, 0.25]), np.array([1.0, 2.0, 4.0])
    ours = PairwiseDebiasObjective(
        labels, offsets, positions, t_plus=t_plus, t_minus=t_minus, learn=False
    )
    lam, hess, _ = ours.compute(scores)
    disc = 1.0 / np.log2(np.arange(2, 5))
    rank = {0: 0, 1: 1, 2: 2}  # by score
    want_l, want_h = np.zeros(3), np.zeros(3)
    for j in (0, 2):
        rho = 1.0 / (1.0 + np.exp(scores[1] - scores[j]))
        delta = abs(disc[rank[1]] - disc[rank[j]]) / disc[0] / (t_plus[1] * t_minus[j])
        want_l[1] += rho * delta
        want_l[j] -= rho * delta
        want_h[[1, j]] += delta * rho * (1 - rho)
    np.testing.assert_allclose(lam, want_l, rtol=1e-12)
    np.testing.assert_allclose(hess, want_h, rtol=1e-12)


def test_pairwise_permutation_and_padding() -> None:
    theta = 1.0 / np.arange(1, 7)
    clicks, positions, offsets, _ = _pbm_clicks(1, 60, 6, theta)
    scores = np.random.default_rng(2).normal(size=clicks.size)
    base = PairwiseDebiasObjective(clicks, offsets, positions, eval_at=5)
    lam, hess, ndcg = base.compute(scores)
    lam2, _, _ = base.compute(scores)
    # Shuffle the documents inside each query and the queries themselves.
    rng = np.random.default_rng(3)
    q_order = rng.permutation(60)
    perm = np.concatenate([offsets[q] + rng.permutation(6) for q in q_order])
    shuffled = PairwiseDebiasObjective(clicks[perm], offsets, positions[perm], eval_at=5)
    s_lam, s_hess, s_ndcg = shuffled.compute(scores[perm])
    np.testing.assert_allclose(s_lam, lam[perm], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(s_hess, hess[perm], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(s_ndcg, ndcg[q_order])
    np.testing.assert_allclose(shuffled.compute(scores[perm])[0], lam2[perm], rtol=1e-9, atol=1e-12)
    # Padding: a query without clicks and a long tail of positions share nothing with the rest.
    pad_clicks = np.concatenate([clicks, np.zeros(9)])
    pad_pos = np.concatenate([positions, np.arange(1, 10)])
    pad_offsets = np.append(offsets, offsets[-1] + 9)
    padded = PairwiseDebiasObjective(pad_clicks, pad_offsets, pad_pos, max_position=6)
    p_lam, _, _ = padded.compute(np.concatenate([scores, np.ones(9)]))
    np.testing.assert_allclose(p_lam[: clicks.size], lam, rtol=1e-12)
    assert not p_lam[clicks.size :].any()
    fresh = PairwiseDebiasObjective(clicks, offsets, positions)
    fresh.compute(scores)
    np.testing.assert_allclose(padded.t_plus, fresh.t_plus, rtol=1e-12)
    np.testing.assert_allclose(padded.t_minus, fresh.t_minus, rtol=1e-12)


def test_position_ratios_keep_positions_without_pairs() -> None:
    previous = np.array([1.0, 0.7, 0.3])
    np.testing.assert_allclose(
        position_ratios(np.array([4.0, 1.0, 0.0]), 1.0, previous), [1, 0.5, 0.3]
    )
    np.testing.assert_allclose(position_ratios(np.array([0.0, 1.0, 2.0]), 1.0, previous), previous)


def test_pairwise_bad_input() -> None:
    _scores, labels, _, offsets = _queries()
    positions = np.tile(np.arange(1, 9), 6)
    with pytest.raises(ValueError, match="one entry per document"):
        PairwiseDebiasObjective(labels, offsets, positions[:5])
    with pytest.raises(ValueError, match="1-based"):
        PairwiseDebiasObjective(labels, offsets, positions - 1)
    with pytest.raises(ValueError, match="power must be positive"):
        PairwiseDebiasObjective(labels, offsets, positions, power=0.0)
    with pytest.raises(ValueError, match="t_minus must hold 8"):
        PairwiseDebiasObjective(labels, offsets, positions, t_minus=np.ones(3))


def test_click_objective_pairwise(tmp_path: Path) -> None:
    params = LambdaMARTParams(num_trees=3, num_leaves=2, min_data_in_leaf=1, threads=1)
    data = _click_data(positions=True)
    objective = click_objective(data, params, None, debias="pairwise")
    assert isinstance(objective, PairwiseDebiasObjective)
    assert objective.description["lambdas"] == "pairwise_debias"
    objective.compute(np.array([0.0, 0.1, 0.2, 0.3, 0.0, 0.0]))
    t_plus = objective.description["t_plus"]
    assert t_plus[0] == 1.0 and t_plus[2] == 1.0 and 0 < t_plus[1] != 1.0  # no click at 3
    assert len(objective.description["t_minus"]) == 3
    assert objective.description["t_minus"][0] == 1.0 and objective.description["t_minus"][1] > 0
    with pytest.raises(DataFormatError, match="needs propensities"):
        click_objective(data, params, None, discount="ctr", debias="pairwise")
    with pytest.raises(DataFormatError, match="needs propensities"):
        click_objective(data, params, None)
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"theta": [1.0, 0.5, 0.25]}))
    theta = click_objective(data, params, path, discount="theta", debias="pairwise")
    np.testing.assert_allclose(theta.disc_pairs, [1.0, 0.5, 0.25])
    assert theta.description["discount"] == "theta"


def test_unbiased_flags_debias() -> None:
    from trainer.config import ConfigError

    data, params = _click_data(positions=True), LambdaMARTParams()
    flags = ("native", data, params, True, None, "log2", None)
    assert isinstance(unbiased_from_flags(*flags, "pairwise"), PairwiseDebiasObjective)
    with pytest.raises(ConfigError, match="--debias 'dpo'"):
        unbiased_from_flags(*flags, "dpo")
    with pytest.raises(ConfigError, match="needs --propensities"):
        unbiased_from_flags(*flags, "ipw")
    with pytest.raises(ConfigError, match="--max-weight"):
        unbiased_from_flags("native", data, params, True, None, "log2", 5.0, "pairwise")


def test_query_norm_is_lightgbms_lambdarank_norm() -> None:
    """With click labels each query's lambdas and hessians are scaled by log2(1 + S) / S, S =
    twice the sum of the pairs' |lambda_ij| (LightGBM's `sum_lambdas`); a query without a
    click keeps its zeros."""
    scores, labels, weights, offsets = _queries(seed=3)
    labels = (labels > 0).astype(np.float64)
    labels[offsets[2] : offsets[3]] = 0.0  # a query without a click
    disc = 1.0 / np.log2(np.arange(2, 10))
    plain = UnbiasedObjective(labels, offsets, weights)
    normed = UnbiasedObjective(labels, offsets, weights, normalize=True)
    lam, hess, _ = plain.compute(scores)
    lam_n, hess_n, _ = normed.compute(scores)
    assert normed.description["query_norm"] == "log2(1 + S) / S"
    factors = []
    for lo, hi in itertools.pairwise(offsets):
        s, lab, w = scores[lo:hi], labels[lo:hi], weights[lo:hi]
        order = np.argsort(-s, kind="stable")
        rank = np.empty(s.size, dtype=np.int64)
        rank[order] = np.arange(s.size)
        ideal = float(np.sum(np.sort(2.0**lab - 1.0)[::-1] * disc[: s.size]))
        total = 0.0
        for i, j in itertools.product(range(s.size), repeat=2):
            if lab[i] > lab[j]:
                delta = w[i] * abs(disc[rank[i]] - disc[rank[j]]) / ideal
                total += 2.0 * delta / (1.0 + np.exp(s[i] - s[j]))
        factor = np.log2(1.0 + total) / total if total > 0 else 1.0
        factors.append(factor)
        np.testing.assert_allclose(lam_n[lo:hi], lam[lo:hi] * factor, rtol=1e-10, atol=1e-15)
        np.testing.assert_allclose(hess_n[lo:hi], hess[lo:hi] * factor, rtol=1e-10, atol=1e-15)
    assert np.all(lam_n[offsets[2] : offsets[3]] == 0.0)
    assert len({round(f, 6) for f in factors if f != 1.0}) > 1  # per query, not one constant
    assert factors[2] == 1.0


def test_position_bias_factors_step_on_normalised_lambdas() -> None:
    scores, labels, _, offsets = _queries(seed=4)
    labels = (labels > 0).astype(np.float64)
    positions = np.tile(np.arange(1, 9), offsets.size - 1)
    plain = PositionBiasObjective(labels, offsets, positions, learning_rate=1.0)
    normed = PositionBiasObjective(labels, offsets, positions, learning_rate=1.0, normalize=True)
    lam, _, _ = plain.compute(scores)
    lam_n, _, _ = normed.compute(scores)
    factor = lam_n[lam != 0] / lam[lam != 0]
    assert not np.allclose(factor, factor[0])  # one factor per query
    assert not np.allclose(plain.bias, normed.bias)
