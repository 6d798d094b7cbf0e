"""Documents put in ranked order within each query, shared by every metric.

Ties in score keep input order (a stable sort on -score, as LightGBM's evaluation does); NaN
scores rank last.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RankedLists:
    """Labels of every query's documents in ranked order, query after query."""

    labels: np.ndarray  # float64 [n_docs], ranked within each query
    ranks: np.ndarray  # int64 [n_docs], 1-based rank within the query
    group_offsets: np.ndarray  # int64 [n_queries + 1]

    @property
    def num_queries(self) -> int:
        return int(self.group_offsets.size - 1)

    def per_query_sum(self, values: np.ndarray) -> np.ndarray:
        """Sum of per-document `values` [n_docs] over each query → float64 [n_queries]."""
        return np.add.reduceat(np.asarray(values, dtype=np.float64), self.group_offsets[:-1])

    def cumulative(self, values: np.ndarray) -> np.ndarray:
        """Running sum of `values` [n_docs] restarting at each query (inclusive)."""
        total = np.cumsum(values, dtype=np.float64)
        before = np.concatenate([[0.0], total])[self.group_offsets[:-1]]
        return total - np.repeat(before, np.diff(self.group_offsets))

    def product_before(self, values: np.ndarray) -> np.ndarray:
        """Product of `values` [n_docs] over the earlier ranks of the same query (1 at rank 1).

        One [queries, length] block per distinct list length, so each query's product is
        computed on its own, in rank order, whatever the other queries hold.
        """
        out = np.empty(values.shape, dtype=np.float64)
        starts, sizes = self.group_offsets[:-1], np.diff(self.group_offsets)
        for length in np.unique(sizes).tolist():
            rows = starts[sizes == length][:, None] + np.arange(length)
            running = np.cumprod(values[rows], axis=1)
            out[rows[:, 0]] = 1.0
            out[rows[:, 1:]] = running[:, :-1]
        return out


def check_inputs(
    scores: np.ndarray, labels: np.ndarray, group_offsets: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validated (scores float64 [n_docs], labels float64 [n_docs], offsets int64 [n_q + 1])."""
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    labels = np.asarray(labels, dtype=np.float64).reshape(-1)
    offsets = np.asarray(group_offsets)
    if not np.issubdtype(offsets.dtype, np.integer):
        raise ValueError("group_offsets must be integers")
    offsets = offsets.astype(np.int64).reshape(-1)
    if scores.shape != labels.shape:
        raise ValueError(f"{scores.size} scores for {labels.size} labels")
    if offsets.size < 2 or offsets[0] != 0 or offsets[-1] != labels.size:
        raise ValueError("group_offsets must start at 0, end at n_docs and hold >= 1 query")
    if np.any(np.diff(offsets) <= 0):
        raise ValueError("every query must have at least one document")
    if not np.all(np.isfinite(labels)):
        raise ValueError("labels must be finite")
    return scores, labels, offsets


def check_cutoff(k: int | None) -> None:
    if k is not None and (isinstance(k, bool) or int(k) != k or k < 1):
        raise ValueError(f"cut-off k must be a positive integer or None, got {k!r}")


def _ranked(keys: np.ndarray, labels: np.ndarray, offsets: np.ndarray) -> RankedLists:
    sizes = np.diff(offsets)
    query = np.repeat(np.arange(sizes.size), sizes)
    # lexsort is stable and sorts by the last key first: query, then -key, then input order.
    order = np.lexsort((-keys, query))
    ranks = np.arange(labels.size, dtype=np.int64) - np.repeat(offsets[:-1], sizes) + 1
    return RankedLists(labels=labels[order], ranks=ranks, group_offsets=offsets)


def rank_by_score(scores: np.ndarray, labels: np.ndarray, group_offsets: np.ndarray) -> RankedLists:
    """Each query's documents by descending score (ties in input order, NaN last)."""
    scores, labels, offsets = check_inputs(scores, labels, group_offsets)
    return _ranked(scores, labels, offsets)


def ideal_ranking(labels: np.ndarray, group_offsets: np.ndarray) -> RankedLists:
    """Each query's documents by descending label: the best possible ranking."""
    labels = np.asarray(labels, dtype=np.float64)
    offsets = np.asarray(group_offsets, dtype=np.int64)
    return _ranked(labels, labels, offsets)


def apply_empty(values: np.ndarray, has_relevant: np.ndarray, empty_value: float) -> np.ndarray:
    """`values` with queries that have no relevant document set to `empty_value`."""
    return np.where(has_relevant, values, float(empty_value))


def is_relevant(labels: np.ndarray, threshold: float | None) -> np.ndarray:
    """bool [n]: a document counts as relevant for the binary metrics (MAP, MRR, precision)
    when its label is positive, as it has gain 2^label - 1 > 0 for NDCG and ERR: a query's
    "no relevant document" then means the same for every metric, fractional labels (averaged
    judgements, IPW weights) included. A `threshold` asks for label >= threshold instead."""
    return labels > 0 if threshold is None else labels >= threshold
