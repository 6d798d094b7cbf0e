"""Precision@k with binary relevance (a positive label, or label >= a threshold)."""

from __future__ import annotations

import numpy as np

from trainer.metrics.ordering import RankedLists, apply_empty, check_cutoff, is_relevant
from trainer.metrics.scored_lists import mean_over_queries, per_query


def precision_of(
    ranked: RankedLists,
    k: int | None = None,
    relevance_threshold: float | None = None,
    empty_value: float = 1.0,
) -> np.ndarray:
    """Share of relevant documents in the top min(k, list length) of each query (RankLib's
    convention: a list shorter than k is not penalised for its length)."""
    check_cutoff(k)
    relevant = is_relevant(ranked.labels, relevance_threshold).astype(np.float64)
    sizes = np.diff(ranked.group_offsets)
    shown = sizes if k is None else np.minimum(sizes, k)
    hits = relevant if k is None else np.where(ranked.ranks <= k, relevant, 0.0)
    precision = ranked.per_query_sum(hits) / shown
    return apply_empty(precision, ranked.per_query_sum(relevant) > 0, empty_value)


# A query with no relevant document gets `empty_value`.
precision_per_query = per_query(precision_of)
mean_precision = mean_over_queries(precision_of)
