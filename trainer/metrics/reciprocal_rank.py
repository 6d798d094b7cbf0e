"""Reciprocal rank of the first relevant document (MRR averaged over queries)."""

from __future__ import annotations

import numpy as np

from trainer.metrics.ordering import RankedLists, apply_empty, check_cutoff, rank_by_score


def reciprocal_rank_of(
    ranked: RankedLists,
    k: int | None = None,
    relevance_threshold: float = 1.0,
    empty_value: float = 1.0,
) -> np.ndarray:
    """1 / rank of the first document with label >= threshold (0 beyond rank k) per query."""
    check_cutoff(k)
    relevant = ranked.labels >= relevance_threshold
    beyond = np.iinfo(np.int64).max
    first = np.minimum.reduceat(np.where(relevant, ranked.ranks, beyond), ranked.group_offsets[:-1])
    reachable = first <= (beyond - 1 if k is None else k)
    rr = np.divide(1.0, first, out=np.zeros(first.shape), where=reachable)
    return apply_empty(rr, first < beyond, empty_value)


def reciprocal_rank_per_query(
    scores: np.ndarray,
    labels: np.ndarray,
    group_offsets: np.ndarray,
    k: int | None = None,
    relevance_threshold: float = 1.0,
    empty_value: float = 1.0,
) -> np.ndarray:
    """Reciprocal rank of each query → float64 [n_queries] (scores, labels: [n_docs]).

    A query with no relevant document gets `empty_value`.
    """
    ranked = rank_by_score(scores, labels, group_offsets)
    return reciprocal_rank_of(ranked, k, relevance_threshold, empty_value)


def mean_reciprocal_rank(
    scores: np.ndarray,
    labels: np.ndarray,
    group_offsets: np.ndarray,
    k: int | None = None,
    relevance_threshold: float = 1.0,
    empty_value: float = 1.0,
) -> float:
    """MRR: the mean over queries of `reciprocal_rank_per_query`."""
    per_query = reciprocal_rank_per_query(
        scores, labels, group_offsets, k, relevance_threshold, empty_value
    )
    return float(np.mean(per_query))
