"""LambdaRank gradients (Burges 2010, as RankLib computes them): per-document lambdas and
hessians from pairwise delta NDCG.

For a pair with label_i > label_j, rho_ij = 1 / (1 + exp(sigma (s_i - s_j))),
lambda_ij = sigma rho_ij |dNDCG_ij| and the second derivative is sigma^2 |dNDCG_ij| rho (1 - rho).
Document i gains +lambda_ij, document j loses it (positive = push up). |dNDCG_ij| is the change in
the query's NDCG when i and j swap places in the current ranking (by score, ties by input order).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from trainer.lambdamart.lambda_kernels import (
    NO_LIMIT,
    _all_queries,
    _discounts,
    _query_norms,
)

__all__ = ["LambdaObjective", "_all_queries", "_query_norms", "lambdas_and_hessians"]

GainDiscount = Literal["ndcg", "dcg_natural_log"]


class LambdaObjective:
    """Lambda gradients for fixed labels and queries; per-query normalisers computed once.

    `gain_discount="ndcg"` is the product's convention (gain 2^l - 1, 1/log2 discount, normalised
    by the ideal DCG). `"dcg_natural_log"` is unnormalised DCG with a 1/ln(1 + rank) discount, the
    convention of Burges's worked example of the lambda gradient (Burges 2010, section 4).
    """

    def __init__(
        self,
        labels: np.ndarray,
        group_offsets: np.ndarray,
        sigma: float = 1.0,
        ndcg_truncation: int | None = None,
        max_pairs_rank: int | None = None,
        eval_at: int = 0,
        empty_value: float = 1.0,
        gain_discount: GainDiscount = "ndcg",
    ) -> None:
        self.labels = np.ascontiguousarray(labels, dtype=np.float64)
        self.offsets = np.ascontiguousarray(group_offsets, dtype=np.int64)
        if self.offsets.ndim != 1 or self.offsets[0] != 0 or self.offsets[-1] != self.labels.size:
            raise ValueError("group_offsets must start at 0 and end at the number of documents")
        if np.any(np.diff(self.offsets) <= 0):
            raise ValueError("every query must have at least one document")
        self.sigma = float(sigma)
        self.eval_at = int(eval_at)
        self.empty_value = float(empty_value)
        max_len = int(np.diff(self.offsets).max())
        self.gains = np.exp2(self.labels) - 1.0
        natural = gain_discount == "dcg_natural_log"
        trunc = max_len if ndcg_truncation is None else int(ndcg_truncation)
        self.disc_eval = _discounts(max(max_len, 1), False)
        disc = _discounts(max_len, natural)
        # Beyond the truncation a position is worth nothing, so the swap delta is exact NDCG@k.
        disc[trunc:] = 0.0
        self.disc_pairs = disc
        inv_trunc, self.inv_k, self.active = _query_norms(
            self.gains, self.labels, self.offsets, disc, trunc, self.disc_eval, max(self.eval_at, 1)
        )
        self.inv_trunc = np.where(self.active, 1.0, 0.0) if natural else inv_trunc
        self.lim_j = NO_LIMIT if max_pairs_rank is None else int(max_pairs_rank)
        self.lim_i = min(trunc, self.lim_j)

    def compute(
        self, scores: np.ndarray, with_lambdas: bool = True
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Lambdas float64 [n_docs], hessians float64 [n_docs], NDCG@eval_at per query [n_queries]
        (zeros when eval_at is 0)."""
        scores = np.ascontiguousarray(scores, dtype=np.float64)
        if scores.shape != self.labels.shape:
            raise ValueError(f"scores has shape {scores.shape}, labels {self.labels.shape}")
        out_l = np.empty_like(scores)
        out_h = np.empty_like(scores)
        out_ndcg = np.zeros(self.offsets.size - 1)
        _all_queries(
            scores,
            self.labels,
            self.gains,
            self.offsets,
            self.disc_pairs,
            self.disc_eval,
            self.inv_trunc,
            self.inv_k,
            self.active,
            self.sigma,
            self.lim_i,
            self.lim_j,
            self.eval_at,
            self.empty_value,
            with_lambdas,
            out_l,
            out_h,
            out_ndcg,
        )
        return out_l, out_h, out_ndcg


def lambdas_and_hessians(
    scores: np.ndarray,
    labels: np.ndarray,
    group_offsets: np.ndarray,
    sigma: float = 1.0,
    ndcg_truncation: int | None = None,
    max_pairs_rank: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Lambdas and hessians float64 [n_docs] for scores/labels [n_docs] grouped by
    group_offsets [n_queries + 1]. Positive lambda = the document should move up."""
    objective = LambdaObjective(labels, group_offsets, sigma, ndcg_truncation, max_pairs_rank)
    lam, hess, _ = objective.compute(scores)
    return lam, hess
