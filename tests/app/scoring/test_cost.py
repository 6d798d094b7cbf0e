"""The moving cost per row that decides whether an interleaved request's second version is
scored on a second thread (app.scoring.cost)."""

from __future__ import annotations

import gc

import pytest

from app.scoring.cost import SMOOTHING, ScoringCost


class _Scorer:
    pass


def test_nothing_is_expected_of_a_scorer_never_seen() -> None:
    assert ScoringCost().expected(_Scorer(), 300) == 0.0


def test_the_first_observation_sets_the_cost_per_row_and_later_ones_move_it() -> None:
    cost, scorer = ScoringCost(), _Scorer()
    cost.observe(scorer, 100, 0.001)
    assert cost.expected(scorer, 300) == pytest.approx(0.003)
    cost.observe(scorer, 200, 0.004)  # 20 us a row against 10
    per_row = 10e-6 + SMOOTHING * (20e-6 - 10e-6)
    assert cost.expected(scorer, 1000) == pytest.approx(per_row * 1000)


def test_each_scorer_has_its_own_figure_and_takes_it_along_when_dropped() -> None:
    cost, fast, slow = ScoringCost(), _Scorer(), _Scorer()
    cost.observe(fast, 100, 0.0001)
    cost.observe(slow, 100, 0.01)
    assert cost.expected(fast, 100) == pytest.approx(0.0001)
    assert cost.expected(slow, 100) == pytest.approx(0.01)
    del slow
    gc.collect()
    assert len(cost._per_row) == 1


def test_empty_requests_and_scorers_without_weak_references_are_ignored() -> None:
    cost, scorer = ScoringCost(), _Scorer()
    cost.observe(scorer, 0, 0.001)
    assert cost.expected(scorer, 10) == 0.0
    cost.observe(7, 10, 0.001)  # an int cannot be weakly referenced
    assert cost.expected(7, 10) == 0.0
