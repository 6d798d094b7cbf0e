"""Unbiased LambdaMART on click labels: inverse-propensity-weighted lambdas and a position
discount fitted to observed click-through (Meituan-Dianping's LambdaDNN write-up, 2019).

IPW (Wang et al. 2016/2018, Joachims et al. 2017): the propensities come from a separate EM fit
(trainer.clicks.propensity) and stay fixed while boosting. The other debiasing objectives build
on `UnbiasedObjective`: the click model's likelihood (lambdamart.click_likelihood, the
default), position-bias factors (lambdamart.position_bias_factors) and Hu et al. 2019's pairwise
debiasing (lambdamart.pairwise_debias); lambdamart.debias_choice picks one from the flags. The
click model and the factors measured better than IPW over five simulated datasets
(bench/results/position_bias.md).

A click at position k is evidence of relevance discounted by the chance theta_k that position k
was examined at all, so each clicked document's gain is weighted by w = 1 / theta_k:
`sum_i c_i / theta_{k_i} * D(rank_i)` is an unbiased estimate of the DCG of relevance under the
position-based model. The lambdas are LambdaRank's on that estimate: for a (clicked, not clicked)
pair |delta| = w_clicked * |delta D|, exactly the pairwise IPW weight. Each query is still
normalised by the ideal DCG of its unweighted labels: normalising by the weighted ideal would
cancel the weight of every single-click query.

The discount D replaces 1/log2(1 + rank) in delta NDCG when `discount` is given, e.g.
`power_discount(fit_power_discount(ctr))`, the power law k^-eta fitted to click-through by
position. It must be positive and non-increasing (the kernel relies on it).

LambdaObjective's numba kernels do the work; only the gains, the discount and the normalisers
change.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trainer.lambdamart.lambdas import LambdaObjective
from trainer.lambdamart.served_positions import served_positions


def ipw_weights(
    positions: np.ndarray, propensities: np.ndarray, max_weight: float | None = None
) -> np.ndarray:
    """1 / theta[position - 1] per document: float64 [n_docs] for 1-based positions [n_docs];
    positions past the end of `propensities` [K] take its last value; clipped to max_weight."""
    theta = np.asarray(propensities, dtype=np.float64)
    if theta.ndim != 1 or theta.size == 0 or np.any(~(theta > 0)):
        raise ValueError("propensities must be a non-empty 1-D array of positive numbers")
    pos = served_positions(positions)
    weights = 1.0 / theta[np.minimum(pos, theta.size) - 1]
    return weights if max_weight is None else np.minimum(weights, max_weight)


def fit_power_discount(curve: np.ndarray, counts: np.ndarray | None = None) -> float:
    """eta of the power law curve_k / curve_1 ~ k^-eta, least squares in log space, each
    position weighted by its impressions `counts` [K] (positions with no clicks left out)."""
    values = np.asarray(curve, dtype=np.float64)
    w = np.ones_like(values) if counts is None else np.asarray(counts, dtype=np.float64)
    ok = np.isfinite(values) & (values > 0) & (w > 0)
    if not ok[0] or ok.sum() < 2:
        raise ValueError("need a positive value at position 1 and at one more position")
    x = np.log(np.arange(1, values.size + 1)[ok])
    y = np.log(values[ok] / values[0])
    eta = -float(np.sum(w[ok] * x * y) / np.sum(w[ok] * x * x))  # through the origin
    return max(eta, 0.0)


def power_discount(eta: float, n: int) -> np.ndarray:
    """k^-eta for ranks 1..n: float64 [n]."""
    return np.arange(1, n + 1, dtype=np.float64) ** -eta


class UnbiasedObjective(LambdaObjective):
    """LambdaObjective with per-document gain weights [n_docs] (IPW) and/or a discount [>= 1]
    for ranks 1.. (padded with its last value). `compute` reports NDCG@eval_at on the
    unweighted labels with the standard discount, as LambdaObjective does. `normalize` scales
    each query's lambdas and hessians as LightGBM's `lambdarank_norm` does (`query_norm`); off
    by default: it undoes much of the IPW weighting (bench/results/position_bias.md)."""

    def __init__(
        self,
        labels: np.ndarray,
        group_offsets: np.ndarray,
        weights: np.ndarray | None = None,
        discount: np.ndarray | None = None,
        sigma: float = 1.0,
        ndcg_truncation: int | None = None,
        max_pairs_rank: int | None = None,
        eval_at: int = 0,
        empty_value: float = 1.0,
        normalize: bool = False,
    ) -> None:
        super().__init__(
            labels, group_offsets, sigma, ndcg_truncation, max_pairs_rank, eval_at, empty_value
        )
        self.normalize = bool(normalize)
        max_len = int(np.diff(self.offsets).max())
        trunc = max_len if ndcg_truncation is None else int(ndcg_truncation)
        if discount is not None:
            self.disc_pairs = _padded_discount(discount, max_len)
            self.disc_pairs[trunc:] = 0.0
            ideal = _ideal_dcg(self.gains, self.offsets, self.disc_pairs)
            self.inv_trunc = np.divide(
                1.0, ideal, out=np.zeros_like(ideal), where=self.active & (ideal > 0)
            )
        self.plain_gains = self.gains
        self.pair_gains = self.gains
        # What the manifest's `training` records about this objective (click_objective adds more).
        self.description: dict[str, Any] = {
            "lambdas": "ipw" if weights is not None else "plain",
            "discount": "log2" if discount is None else "custom",
        }
        if self.normalize:
            self.description["query_norm"] = "log2(1 + S) / S"
        if weights is not None:
            w = np.asarray(weights, dtype=np.float64)
            if w.shape != self.labels.shape or np.any(~(w > 0)):
                raise ValueError("weights must be positive, one per document")
            self.pair_gains = np.ascontiguousarray(self.gains * w)

    def compute(
        self, scores: np.ndarray, with_lambdas: bool = True
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Lambdas float64 [n_docs], hessians float64 [n_docs], NDCG@eval_at per query: the
        lambdas from the weighted gains, the NDCG from the plain ones (a second, pair-free
        pass of LambdaObjective.compute)."""
        if not with_lambdas:
            return super().compute(scores, with_lambdas=False)
        eval_at = self.eval_at
        try:
            self.gains, self.eval_at = self.pair_gains, 0
            lam, hess, ndcg = super().compute(scores)
        finally:
            self.gains, self.eval_at = self.plain_gains, eval_at
        if self.normalize:
            factor = query_norm(lam, self.offsets)
            lam, hess = lam * factor, hess * factor
        if eval_at > 0:
            ndcg = super().compute(scores, with_lambdas=False)[2]
        return lam, hess, ndcg


def query_norm(lambdas: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """LightGBM's `lambdarank_norm`: per document [n_docs], its query's log2(1 + S) / S with
    S = sum of |lambda| over the query's documents (1 where S is 0). With two label levels
    (clicks) every document's pairs push it one way, so S is LightGBM's sum, twice the pairs'
    |lambda_ij|; with more levels it is a lower bound. Queries with many large lambdas are
    damped (log), queries with little gradient keep it."""
    total = np.add.reduceat(np.abs(lambdas), offsets[:-1])
    factor = np.divide(np.log2(1.0 + total), total, out=np.ones_like(total), where=total > 0)
    return np.repeat(factor, np.diff(offsets))


def _ideal_dcg(gains: np.ndarray, offsets: np.ndarray, discount: np.ndarray) -> np.ndarray:
    """Per query: the DCG of its gains [n_docs] sorted best first under discount [max_len]."""
    query = np.repeat(np.arange(offsets.size - 1), np.diff(offsets))
    order = np.lexsort((-gains, query))
    rank = np.arange(gains.size) - offsets[query]
    return np.add.reduceat(gains[order] * discount[rank], offsets[:-1])


def _padded_discount(discount: np.ndarray, n: int) -> np.ndarray:
    d = np.asarray(discount, dtype=np.float64)
    if d.ndim != 1 or d.size == 0 or np.any(~(d > 0)) or np.any(np.diff(d) > 0):
        raise ValueError("discount must be a non-empty, positive, non-increasing 1-D array")
    out = np.full(n, d[-1])
    out[: min(n, d.size)] = d[:n]
    return out


def lambdas_and_hessians(
    scores: np.ndarray,
    labels: np.ndarray,
    group_offsets: np.ndarray,
    sigma: float = 1.0,
    ndcg_truncation: int | None = None,
    max_pairs_rank: int | None = None,
    weights: np.ndarray | None = None,
    discount: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """lambdas.lambdas_and_hessians with IPW gain weights [n_docs] and a discount [K]: float64
    lambdas and hessians [n_docs]. Positive lambda = the document should move up."""
    objective = UnbiasedObjective(
        labels, group_offsets, weights, discount, sigma, ndcg_truncation, max_pairs_rank
    )
    lam, hess, _ = objective.compute(scores)
    return lam, hess
