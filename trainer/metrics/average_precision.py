"""Average precision (MAP when averaged over queries), binary relevance: label >= threshold."""

from __future__ import annotations

import numpy as np

from trainer.metrics.ordering import RankedLists, apply_empty, check_cutoff, is_relevant
from trainer.metrics.scored_lists import mean_over_queries, per_query


def average_precision_of(
    ranked: RankedLists,
    k: int | None = None,
    relevance_threshold: float | None = None,
    empty_value: float = 1.0,
) -> np.ndarray:
    """AP@k per query → float64 [n_queries]: the mean of precision@rank over the relevant
    documents ranked within k, divided by min(k, number relevant) (LightGBM's MAP@k)."""
    check_cutoff(k)
    relevant = is_relevant(ranked.labels, relevance_threshold).astype(np.float64)
    precision = ranked.cumulative(relevant) / ranked.ranks
    hits = relevant if k is None else np.where(ranked.ranks <= k, relevant, 0.0)
    n_relevant = ranked.per_query_sum(relevant)
    denominator = n_relevant if k is None else np.minimum(n_relevant, k)
    total = ranked.per_query_sum(precision * hits)
    has_relevant = n_relevant > 0
    ap = np.divide(total, denominator, out=np.zeros_like(total), where=has_relevant)
    return apply_empty(ap, has_relevant, empty_value)


# A query with no relevant document gets `empty_value`. MAP is the mean over queries.
average_precision_per_query = per_query(average_precision_of)
mean_average_precision = mean_over_queries(average_precision_of)
