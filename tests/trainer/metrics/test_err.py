"""ERR@k by hand: R = (2^l - 1) / 2^max_grade, ERR = sum_r R_r / r * prod_{i<r} (1 - R_i)."""

from __future__ import annotations

import numpy as np
import pytest

from trainer.metrics.err import err_per_query, mean_err


def test_by_hand() -> None:
    scores, labels, offsets = np.array([3.0, 2, 1]), np.array([2.0, 1, 0]), np.array([0, 3])
    # R = 3/4, 1/4, 0 → 3/4 + (1/2)(1/4)(1/4).
    assert err_per_query(scores, labels, offsets)[0] == pytest.approx(0.78125, abs=1e-15)
    assert err_per_query(scores, labels, offsets, k=1)[0] == pytest.approx(0.75)
    assert err_per_query(scores, labels, offsets, k=10)[0] == pytest.approx(0.78125)
    # With max grade 4: R = 3/16, 1/16 → 3/16 + (1/2)(13/16)(1/16).
    expected = 3 / 16 + 0.5 * (13 / 16) * (1 / 16)
    assert err_per_query(scores, labels, offsets, max_grade=4)[0] == pytest.approx(expected)
    with pytest.raises(ValueError, match="max_grade"):
        err_per_query(scores, labels, offsets, max_grade=1)


def test_grade_defaults_to_the_largest_label_in_all_queries() -> None:
    scores, labels, offsets = np.zeros(2), np.array([1.0, 3.0]), np.array([0, 1, 2])
    np.testing.assert_allclose(err_per_query(scores, labels, offsets), [1 / 8, 7 / 8])


def test_ties_empty_queries_and_mean() -> None:
    scores, offsets = np.zeros(2), np.array([0, 2])
    # Tie: input order, so label 0 first and the label-1 document is reached at rank 2.
    assert err_per_query(scores, np.array([0.0, 1]), offsets)[0] == pytest.approx(0.25)
    labels, two = np.array([0.0, 1, 0, 0]), np.array([0, 2, 4])
    assert mean_err(np.zeros(4), labels, two) == pytest.approx(0.125)


@pytest.mark.parametrize("labels", [[0.0], [0.0, 0.0, 0.0]])
def test_query_without_relevant_document_is_zero(labels: list[float]) -> None:
    """Every R is (2^0 - 1) / 2^max = 0, so ERR is defined there and 0 (no NDCG-style
    convention), alone or beside queries with relevant documents."""
    alone = np.asarray(labels)
    assert err_per_query(np.zeros(alone.size), alone, np.array([0, alone.size]))[0] == 0.0
    mixed = np.concatenate([alone, [2.0, 0.0]])
    offsets = np.array([0, alone.size, alone.size + 2])
    np.testing.assert_allclose(err_per_query(-np.arange(mixed.size), mixed, offsets), [0, 3 / 4])


def test_long_lists_stay_accurate() -> None:
    # 5,000 highly relevant documents: the running product underflows to 0 without harm.
    labels = np.full(5000, 4.0)
    value = err_per_query(-np.arange(5000.0), labels, np.array([0, 5000]))[0]
    r = 15 / 16
    expected = sum(r * (1 - r) ** i / (i + 1) for i in range(5000))
    assert value == pytest.approx(expected, rel=1e-12)
