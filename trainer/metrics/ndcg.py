"""NDCG@k: gain 2^label - 1, discount 1 / log2(rank + 1), normalised by the ideal ranking."""

from __future__ import annotations

import numpy as np

from trainer.metrics.ordering import RankedLists, apply_empty, check_cutoff, ideal_ranking
from trainer.metrics.scored_lists import mean_over_queries, per_query


def dcg_of(ranked: RankedLists, k: int | None = None) -> np.ndarray:
    """DCG@k of every query → float64 [n_queries] (k None: the whole list)."""
    check_cutoff(k)
    contribution = (np.exp2(ranked.labels) - 1.0) / np.log2(ranked.ranks + 1.0)
    if k is not None:
        contribution = np.where(ranked.ranks <= k, contribution, 0.0)
    return ranked.per_query_sum(contribution)


def ndcg_of(
    ranked: RankedLists, ideal: RankedLists, k: int | None = None, empty_value: float = 1.0
) -> np.ndarray:
    """NDCG@k per query from a ranking and the ideal ranking of the same lists."""
    dcg = dcg_of(ranked, k)
    best = dcg_of(ideal, k)
    has_relevant = best > 0
    ratio = np.divide(dcg, best, out=np.zeros_like(dcg), where=has_relevant)
    return apply_empty(ratio, has_relevant, empty_value)


def ndcg_against_ideal(
    ranked: RankedLists, k: int | None = None, empty_value: float = 1.0
) -> np.ndarray:
    """NDCG@k per query, the ideal ranking taken from the lists' own labels. A query whose
    ideal DCG is 0 (no relevant document) gets `empty_value` (LightGBM: 1)."""
    return ndcg_of(ranked, ideal_ranking(ranked.labels, ranked.group_offsets), k, empty_value)


ndcg_per_query = per_query(ndcg_against_ideal)
mean_ndcg = mean_over_queries(ndcg_against_ideal)
# Not normalised: with IPW labels (clicks.ipw_eval) an unbiased estimate of the DCG of
# examined-click relevance, which a per-query ideal DCG of the weighted labels would bias.
mean_dcg = mean_over_queries(dcg_of)
