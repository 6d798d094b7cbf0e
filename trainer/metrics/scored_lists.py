"""A metric of ranked lists (`<metric>_of(ranked, ...)` → float64 [n_queries]) as a function of
scores: `per_query` gives every query's value, `mean_over_queries` their mean.

Both take scores, labels: [n_docs] and group_offsets: int [n_queries + 1], rank each query's
documents by descending score (ties in input order, NaN last; `ordering.rank_by_score`), and
pass the metric's own options (k, relevance_threshold, empty_value, ...) through.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Concatenate, ParamSpec

import numpy as np

from trainer.metrics.ordering import RankedLists, rank_by_score

P = ParamSpec("P")
ScoredPerQuery = Callable[Concatenate[np.ndarray, np.ndarray, np.ndarray, P], np.ndarray]
ScoredMean = Callable[Concatenate[np.ndarray, np.ndarray, np.ndarray, P], float]


def per_query(metric: Callable[Concatenate[RankedLists, P], np.ndarray]) -> ScoredPerQuery[P]:
    """`metric` of each query → float64 [n_queries], from scores."""

    def of_scores(
        scores: np.ndarray,
        labels: np.ndarray,
        group_offsets: np.ndarray,
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> np.ndarray:
        return metric(rank_by_score(scores, labels, group_offsets), *args, **kwargs)

    return of_scores


def mean_over_queries(metric: Callable[Concatenate[RankedLists, P], np.ndarray]) -> ScoredMean[P]:
    """The mean of `metric` over queries, from scores."""

    def of_scores(
        scores: np.ndarray,
        labels: np.ndarray,
        group_offsets: np.ndarray,
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> float:
        return float(np.mean(metric(rank_by_score(scores, labels, group_offsets), *args, **kwargs)))

    return of_scores
