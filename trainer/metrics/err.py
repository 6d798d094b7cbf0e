"""Expected reciprocal rank (Chapelle et al. 2009) with graded relevance.

A document of label l satisfies the user with probability R = (2^l - 1) / 2^max_grade;
ERR@k = sum over ranks r <= k of R_r / r * prod_{i < r} (1 - R_i).
"""

from __future__ import annotations

import numpy as np

from trainer.metrics.ordering import RankedLists, apply_empty, check_cutoff
from trainer.metrics.scored_lists import mean_over_queries, per_query


def err_of(ranked: RankedLists, k: int | None = None, max_grade: float | None = None) -> np.ndarray:
    """ERR@k per query → float64 [n_queries]; max_grade defaults to the largest label."""
    check_cutoff(k)
    top = float(ranked.labels.max())
    grade = top if max_grade is None else float(max_grade)
    if grade < top:
        raise ValueError(f"max_grade {grade} is below the largest label {top}")
    satisfied = (np.exp2(ranked.labels) - 1.0) / np.exp2(grade)
    reach = ranked.product_before(1.0 - satisfied)
    contribution = satisfied * reach / ranked.ranks
    if k is not None:
        contribution = np.where(ranked.ranks <= k, contribution, 0.0)
    # No document can satisfy the user, so ERR is defined and 0: unlike NDCG (0/0) it takes no
    # convention. Pinned so a list of only negative grades cannot score below 0 either.
    has_relevant = ranked.per_query_sum(satisfied > 0) > 0
    return apply_empty(ranked.per_query_sum(contribution), has_relevant, 0.0)


err_per_query = per_query(err_of)
mean_err = mean_over_queries(err_of)
