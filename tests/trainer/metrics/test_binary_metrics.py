"""MAP, MRR and Precision@k by hand."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from trainer.metrics.average_precision import average_precision_per_query, mean_average_precision
from trainer.metrics.precision import mean_precision, precision_per_query
from trainer.metrics.reciprocal_rank import mean_reciprocal_rank, reciprocal_rank_per_query


def ranked(labels: list[float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One query whose documents are already in ranked order (descending scores)."""
    n = len(labels)
    return -np.arange(n, dtype=np.float64), np.array(labels, dtype=np.float64), np.array([0, n])


def test_average_precision() -> None:
    assert average_precision_per_query(*ranked([1, 0, 1, 0]))[0] == pytest.approx((1 + 2 / 3) / 2)
    assert average_precision_per_query(*ranked([0, 0, 2]))[0] == pytest.approx(1 / 3)
    # @k divides by min(k, number relevant), as LightGBM's map@k.
    assert average_precision_per_query(*ranked([1, 0, 1, 0]), k=2)[0] == pytest.approx(0.5)
    assert average_precision_per_query(*ranked([0, 1, 1]), k=2)[0] == pytest.approx(0.25)
    assert average_precision_per_query(*ranked([1, 0, 1]), k=10)[0] == pytest.approx(5 / 6)


def test_relevance_threshold() -> None:
    # Any positive label counts as relevant by default; with threshold 2 only label 2 does.
    assert average_precision_per_query(*ranked([1, 2]))[0] == 1.0
    assert average_precision_per_query(*ranked([1, 2]), relevance_threshold=2)[0] == 0.5
    assert reciprocal_rank_per_query(*ranked([1, 2]), relevance_threshold=2)[0] == 0.5
    assert precision_per_query(*ranked([1, 2, 0]), k=2, relevance_threshold=2)[0] == 0.5


def test_a_fractional_label_is_relevant_as_it_has_gain() -> None:
    """A trial: labels 0.5 ranked first gave NDCG 1, DCG and ERR > 0 but MAP and MRR 0 (label
    >= 1 was the rule), and a 0.9 ranked above a 1 gave MRR 1/3 (IPW labels are fractional)."""
    assert reciprocal_rank_per_query(*ranked([0.9, 0, 1]))[0] == 1.0
    only = ranked([0.5, 0, 0])
    assert average_precision_per_query(*only, empty_value=0.0)[0] == 1.0
    assert reciprocal_rank_per_query(*only, empty_value=0.0)[0] == 1.0
    assert precision_per_query(*only, k=2, empty_value=0.0)[0] == 0.5
    none = ranked([0, 0])
    assert average_precision_per_query(*none, empty_value=0.25)[0] == 0.25


def test_reciprocal_rank() -> None:
    assert reciprocal_rank_per_query(*ranked([0, 0, 1]))[0] == pytest.approx(1 / 3)
    assert reciprocal_rank_per_query(*ranked([2, 0, 1]))[0] == 1.0
    assert reciprocal_rank_per_query(*ranked([0, 0, 1]), k=2)[0] == 0.0
    assert reciprocal_rank_per_query(*ranked([0, 0, 1]), k=3)[0] == pytest.approx(1 / 3)


def test_precision() -> None:
    assert precision_per_query(*ranked([1, 0, 1]), k=2)[0] == 0.5
    assert precision_per_query(*ranked([1, 0, 1]), k=1)[0] == 1.0
    # A list shorter than k is judged on its length.
    assert precision_per_query(*ranked([1, 0, 1]), k=10)[0] == pytest.approx(2 / 3)
    assert precision_per_query(*ranked([1, 0, 1, 1]))[0] == 0.75


def test_ties_keep_input_order() -> None:
    scores, offsets = np.zeros(3), np.array([0, 3])
    assert reciprocal_rank_per_query(scores, np.array([0.0, 1, 0]), offsets)[0] == 0.5
    assert precision_per_query(scores, np.array([0.0, 1, 1]), offsets, k=1)[0] == 0.0


@pytest.mark.parametrize(
    "metric", [average_precision_per_query, reciprocal_rank_per_query, precision_per_query]
)
def test_no_relevant_document_uses_empty_value(metric: Callable[..., np.ndarray]) -> None:
    assert metric(*ranked([0, 0]))[0] == 1.0
    assert metric(*ranked([0, 0]), empty_value=0.0)[0] == 0.0


def test_means_over_queries() -> None:
    scores = np.array([2.0, 1, 2, 1])
    labels = np.array([0.0, 1, 1, 0])
    offsets = np.array([0, 2, 4])
    assert mean_average_precision(scores, labels, offsets) == pytest.approx(0.75)
    assert mean_reciprocal_rank(scores, labels, offsets) == pytest.approx(0.75)
    assert mean_precision(scores, labels, offsets, k=1) == pytest.approx(0.5)
