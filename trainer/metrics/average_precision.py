"""Average precision (MAP when averaged over queries), binary relevance: label >= threshold."""

from __future__ import annotations

import numpy as np

from trainer.metrics.ordering import RankedLists, apply_empty, check_cutoff, rank_by_score


def average_precision_of(
    ranked: RankedLists,
    k: int | None = None,
    relevance_threshold: float = 1.0,
    empty_value: float = 1.0,
) -> np.ndarray:
    """AP@k per query → float64 [n_queries]: the mean of precision@rank over the relevant
    documents ranked within k, divided by min(k, number relevant) (LightGBM's MAP@k)."""
    check_cutoff(k)
    relevant = (ranked.labels >= relevance_threshold).astype(np.float64)
    precision = ranked.cumulative(relevant) / ranked.ranks
    hits = relevant if k is None else np.where(ranked.ranks <= k, relevant, 0.0)
    n_relevant = ranked.per_query_sum(relevant)
    denominator = n_relevant if k is None else np.minimum(n_relevant, k)
    total = ranked.per_query_sum(precision * hits)
    has_relevant = n_relevant > 0
    ap = np.divide(total, denominator, out=np.zeros_like(total), where=has_relevant)
    return apply_empty(ap, has_relevant, empty_value)


def average_precision_per_query(
    scores: np.ndarray,
    labels: np.ndarray,
    group_offsets: np.ndarray,
    k: int | None = None,
    relevance_threshold: float = 1.0,
    empty_value: float = 1.0,
) -> np.ndarray:
    """Average precision of each query → float64 [n_queries] (scores, labels: [n_docs]).

    A query with no relevant document gets `empty_value`.
    """
    ranked = rank_by_score(scores, labels, group_offsets)
    return average_precision_of(ranked, k, relevance_threshold, empty_value)


def mean_average_precision(
    scores: np.ndarray,
    labels: np.ndarray,
    group_offsets: np.ndarray,
    k: int | None = None,
    relevance_threshold: float = 1.0,
    empty_value: float = 1.0,
) -> float:
    """MAP: the mean over queries of `average_precision_per_query`."""
    per_query = average_precision_per_query(
        scores, labels, group_offsets, k, relevance_threshold, empty_value
    )
    return float(np.mean(per_query))
