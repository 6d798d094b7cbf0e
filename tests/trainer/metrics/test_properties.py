"""Property tests: every metric equals a plain per-query reference implementation, and is
unchanged by what should not change it (query order, order among distinct scores, padding
with irrelevant documents ranked last)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.metrics.average_precision import average_precision_per_query
from trainer.metrics.err import err_per_query
from trainer.metrics.ndcg import ndcg_per_query
from trainer.metrics.precision import precision_per_query
from trainer.metrics.reciprocal_rank import reciprocal_rank_per_query

Lists = list[tuple[list[int], list[int]]]  # per query: (labels, scores)
MAX_GRADE = 4


def ranked_labels(labels: list[int], scores: list[int]) -> list[int]:
    order = sorted(range(len(labels)), key=lambda i: -scores[i])  # Python's sort is stable
    return [labels[i] for i in order]


def reference(name: str, labels: list[int], scores: list[int], k: int | None) -> float:
    ranked = ranked_labels(labels, scores)
    cut = ranked if k is None else ranked[:k]
    relevant = [label >= 1 for label in ranked]
    if not any(label > 0 for label in labels):
        return 0.0 if name == "err" else 1.0  # ERR is defined there; the others' convention
    if name == "ndcg":

        def dcg(ls: list[int]) -> float:
            return sum((2**g - 1) / math.log2(r + 2) for r, g in enumerate(ls))

        ideal = sorted(labels, reverse=True)
        return dcg(cut) / dcg(ideal if k is None else ideal[:k])
    if name == "map":
        hits = [sum(relevant[: r + 1]) / (r + 1) for r in range(len(cut)) if relevant[r]]
        return sum(hits) / (sum(relevant) if k is None else min(k, sum(relevant)))
    if name == "mrr":
        first = [r for r in range(len(cut)) if relevant[r]]
        return 1 / (first[0] + 1) if first else 0.0
    if name == "precision":
        return sum(relevant[: len(cut)]) / len(cut)
    err, reach = 0.0, 1.0
    for r, label in enumerate(cut):
        satisfied = (2**label - 1) / 2**MAX_GRADE
        err += reach * satisfied / (r + 1)
        reach *= 1 - satisfied
    return err


METRICS: dict[str, Callable[..., np.ndarray]] = {
    "ndcg": ndcg_per_query,
    "map": average_precision_per_query,
    "mrr": reciprocal_rank_per_query,
    "precision": precision_per_query,
    "err": lambda s, y, o, k: err_per_query(s, y, o, k, max_grade=MAX_GRADE),
}


def flatten(lists: Lists) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    labels = np.array([y for ys, _ in lists for y in ys], dtype=np.float64)
    scores = np.array([s for _, ss in lists for s in ss], dtype=np.float64)
    offsets = np.cumsum([0] + [len(ls) for ls, _ in lists])
    return scores, labels, offsets


def query(max_size: int = 12) -> st.SearchStrategy[tuple[list[int], list[int]]]:
    # Scores from a small range, so ties are common.
    return st.integers(1, max_size).flatmap(
        lambda n: st.tuples(
            st.lists(st.integers(0, MAX_GRADE), min_size=n, max_size=n),
            st.lists(st.integers(-3, 3), min_size=n, max_size=n),
        )
    )


cutoffs = st.sampled_from([None, 1, 2, 3, 5, 10, 20])


@settings(max_examples=150, deadline=None)
@given(lists=st.lists(query(), min_size=1, max_size=8), k=cutoffs)
def test_equals_reference(lists: Lists, k: int | None) -> None:
    scores, labels, offsets = flatten(lists)
    for name, metric in METRICS.items():
        expected = [reference(name, ls, ss, k) for ls, ss in lists]
        np.testing.assert_allclose(metric(scores, labels, offsets, k), expected, rtol=1e-12)


@settings(max_examples=80, deadline=None)
@given(lists=st.lists(query(), min_size=1, max_size=8), k=cutoffs, data=st.data())
def test_query_order_does_not_matter(lists: Lists, k: int | None, data: st.DataObject) -> None:
    order = data.draw(st.permutations(range(len(lists))))
    for metric in METRICS.values():
        before = metric(*flatten(lists), k)
        after = metric(*flatten([lists[i] for i in order]), k)
        np.testing.assert_array_equal(after, before[list(order)])


@settings(max_examples=80, deadline=None)
@given(
    labels=st.lists(st.integers(0, MAX_GRADE), min_size=1, max_size=12),
    k=cutoffs,
    data=st.data(),
)
def test_order_among_distinct_scores_does_not_matter(
    labels: list[int], k: int | None, data: st.DataObject
) -> None:
    scores = list(range(len(labels)))
    order = data.draw(st.permutations(range(len(labels))))
    shuffled = [([labels[i] for i in order], [scores[i] for i in order])]
    for metric in METRICS.values():
        np.testing.assert_allclose(
            metric(*flatten(shuffled), k), metric(*flatten([(labels, scores)]), k), rtol=1e-12
        )


@settings(max_examples=80, deadline=None)
@given(lists=st.lists(query(), min_size=1, max_size=6), pad=st.integers(1, 5), k=cutoffs)
def test_irrelevant_padding_ranked_last_does_not_matter(
    lists: Lists, pad: int, k: int | None
) -> None:
    padded: Lists = [(ls + [0] * pad, ss + [-10] * pad) for ls, ss in lists]
    for name, metric in METRICS.items():
        if name == "precision":  # its denominator is the list length: padding changes it
            continue
        np.testing.assert_allclose(
            metric(*flatten(padded), k), metric(*flatten(lists), k), rtol=1e-12
        )
