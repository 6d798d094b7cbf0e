"""Precision@k with binary relevance (label >= threshold)."""

from __future__ import annotations

import numpy as np

from trainer.metrics.ordering import RankedLists, apply_empty, check_cutoff, rank_by_score


def precision_of(
    ranked: RankedLists,
    k: int | None = None,
    relevance_threshold: float = 1.0,
    empty_value: float = 1.0,
) -> np.ndarray:
    """Share of relevant documents in the top min(k, list length) of each query (RankLib's
    convention: a list shorter than k is not penalised for its length)."""
    check_cutoff(k)
    relevant = (ranked.labels >= relevance_threshold).astype(np.float64)
    sizes = np.diff(ranked.group_offsets)
    shown = sizes if k is None else np.minimum(sizes, k)
    hits = relevant if k is None else np.where(ranked.ranks <= k, relevant, 0.0)
    precision = ranked.per_query_sum(hits) / shown
    return apply_empty(precision, ranked.per_query_sum(relevant) > 0, empty_value)


def precision_per_query(
    scores: np.ndarray,
    labels: np.ndarray,
    group_offsets: np.ndarray,
    k: int | None = None,
    relevance_threshold: float = 1.0,
    empty_value: float = 1.0,
) -> np.ndarray:
    """Precision@k of each query → float64 [n_queries] (scores, labels: [n_docs]).

    A query with no relevant document gets `empty_value`.
    """
    ranked = rank_by_score(scores, labels, group_offsets)
    return precision_of(ranked, k, relevance_threshold, empty_value)


def mean_precision(
    scores: np.ndarray,
    labels: np.ndarray,
    group_offsets: np.ndarray,
    k: int | None = None,
    relevance_threshold: float = 1.0,
    empty_value: float = 1.0,
) -> float:
    """Mean over queries of `precision_per_query`."""
    per_query = precision_per_query(
        scores, labels, group_offsets, k, relevance_threshold, empty_value
    )
    return float(np.mean(per_query))
