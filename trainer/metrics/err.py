"""Expected reciprocal rank (Chapelle et al. 2009) with graded relevance.

A document of label l satisfies the user with probability R = (2^l - 1) / 2^max_grade;
ERR@k = sum over ranks r <= k of R_r / r * prod_{i < r} (1 - R_i).
"""

from __future__ import annotations

import numpy as np

from trainer.metrics.ordering import RankedLists, apply_empty, check_cutoff, rank_by_score


def err_of(
    ranked: RankedLists,
    k: int | None = None,
    max_grade: float | None = None,
    empty_value: float = 1.0,
) -> np.ndarray:
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
    has_relevant = ranked.per_query_sum(satisfied > 0) > 0
    return apply_empty(ranked.per_query_sum(contribution), has_relevant, empty_value)


def err_per_query(
    scores: np.ndarray,
    labels: np.ndarray,
    group_offsets: np.ndarray,
    k: int | None = None,
    max_grade: float | None = None,
    empty_value: float = 1.0,
) -> np.ndarray:
    """ERR@k of each query → float64 [n_queries] (scores, labels: [n_docs]).

    A query with no relevant document (all labels <= 0) gets `empty_value`.
    """
    ranked = rank_by_score(scores, labels, group_offsets)
    return err_of(ranked, k, max_grade, empty_value)


def mean_err(
    scores: np.ndarray,
    labels: np.ndarray,
    group_offsets: np.ndarray,
    k: int | None = None,
    max_grade: float | None = None,
    empty_value: float = 1.0,
) -> float:
    """Mean over queries of `err_per_query`."""
    return float(np.mean(err_per_query(scores, labels, group_offsets, k, max_grade, empty_value)))
