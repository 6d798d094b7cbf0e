"""Reciprocal rank of the first relevant document (MRR averaged over queries)."""

from __future__ import annotations

import numpy as np

from trainer.metrics.ordering import RankedLists, apply_empty, check_cutoff, is_relevant
from trainer.metrics.scored_lists import mean_over_queries, per_query


def reciprocal_rank_of(
    ranked: RankedLists,
    k: int | None = None,
    relevance_threshold: float | None = None,
    empty_value: float = 1.0,
) -> np.ndarray:
    """1 / rank of the first relevant document (ordering.is_relevant; 0 beyond rank k) per query."""
    check_cutoff(k)
    relevant = is_relevant(ranked.labels, relevance_threshold)
    beyond = np.iinfo(np.int64).max
    first = np.minimum.reduceat(np.where(relevant, ranked.ranks, beyond), ranked.group_offsets[:-1])
    reachable = first <= (beyond - 1 if k is None else k)
    rr = np.divide(1.0, first, out=np.zeros(first.shape), where=reachable)
    return apply_empty(rr, first < beyond, empty_value)


# A query with no relevant document gets `empty_value`. MRR is the mean over queries.
reciprocal_rank_per_query = per_query(reciprocal_rank_of)
mean_reciprocal_rank = mean_over_queries(reciprocal_rank_of)
