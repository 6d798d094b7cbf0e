"""Scoring the two versions of an interleaved request at once (app.experiments.score_both): the
results come back in order whichever thread ran `second`, the calling thread takes `second`
when the beside thread is late, and a failing `first` leaves nothing running."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from app.experiments import score_both


def _ran_on(where: list[str], value: float) -> np.ndarray:
    where.append(threading.current_thread().name)
    return np.full(3, value)


def test_both_results_in_order() -> None:
    where: list[str] = []
    first, second = score_both.score_both(lambda: _ran_on(where, 1.0), lambda: _ran_on(where, 2.0))
    assert first.tolist() == [1.0] * 3 and second.tolist() == [2.0] * 3
    assert len(where) == 2


def test_the_calling_thread_scores_second_when_the_beside_thread_is_busy() -> None:
    release = threading.Event()
    busy = score_both._beside_pool().submit(release.wait, 10)  # the one beside thread, occupied
    try:
        where: list[str] = []
        _, second = score_both.score_both(lambda: _ran_on(where, 1.0), lambda: _ran_on(where, 2.0))
        assert where == [threading.current_thread().name] * 2
        assert second.tolist() == [2.0] * 3
    finally:
        release.set()
        busy.result()


def test_a_failing_first_does_not_run_second_here_and_waits_for_the_beside_thread() -> None:
    started, release = threading.Event(), threading.Event()
    done: list[bool] = []

    def second() -> np.ndarray:
        started.set()
        release.wait(10)
        done.append(True)
        return np.zeros(1)

    def first() -> np.ndarray:
        started.wait(10)  # the beside thread has claimed `second`
        threading.Timer(0.05, release.set).start()
        raise ValueError("scorer failed")

    with pytest.raises(ValueError, match="scorer failed"):
        score_both.score_both(first, second)
    assert done == [True]  # returned only after the beside thread's work ended


def test_a_failing_first_leaves_an_unstarted_second_unrun() -> None:
    release = threading.Event()
    busy = score_both._beside_pool().submit(release.wait, 10)
    ran: list[bool] = []

    def first() -> np.ndarray:
        # The beside thread frees up only after the failure: `second` is still unclaimed.
        threading.Timer(0.05, release.set).start()
        raise ValueError("scorer failed")

    def second() -> np.ndarray:
        ran.append(True)
        return np.zeros(1)

    try:
        with pytest.raises(ValueError, match="scorer failed"):
            score_both.score_both(first, second)
    finally:
        busy.result()
    assert ran == []


def test_both_scorings_run_on_one_thread_each_and_give_the_gil_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The compiled scorer keeps the GIL on an event loop's thread (app.scoring.compiled);
    here that would keep the beside thread from starting until `first` ended."""
    import asyncio

    from app.scoring import beside

    monkeypatch.setattr(beside, "ready", lambda: None)  # a split uses the pooled thread

    from app.scoring.compiled import CompiledTreeScorer
    from tests.support import random_ensemble

    # `threads` and an always-spare core would split 600 rows over a second thread anywhere
    # else; beside another scoring each runs whole on its own thread.
    scorer = CompiledTreeScorer(
        random_ensemble(6, num_trees=10, depth=3, seed=1),
        threads=2,
        parallel_min_rows=16,
        spare_core_min_rows=16,
    )
    rows = np.random.default_rng(1).normal(size=(600, 6)).astype(np.float32)
    splits: list[int] = []
    real_split = scorer._split
    scorer._split = lambda n: (splits.append(n), real_split(n))[1]  # type: ignore[method-assign]
    entries: list[str] = []
    for name in ("_entry", "_held_entry"):
        entry = getattr(scorer, name)
        setattr(scorer, name, lambda *a, e=entry, n=name: (entries.append(n), e(*a))[1])

    # `first` waits until the pooled thread has claimed `second`: were that thread late, the
    # calling thread would rightly score `second` itself, alone, and split it.
    claimed = threading.Event()

    def first_job() -> np.ndarray:
        assert claimed.wait(10)
        return scorer.score(rows)

    def second_job() -> np.ndarray:
        claimed.set()
        return scorer.score(rows)

    async def interleaved() -> tuple[np.ndarray, np.ndarray]:
        return score_both.score_both(first_job, second_job)

    first, second = asyncio.run(interleaved())
    assert entries.count("_entry") == 2 and "_held_entry" not in entries
    assert splits == [600, 600]  # asked, and neither split
    entries.clear()
    alone = scorer.score(rows)  # off the loop, no scoring beside: split over two threads
    assert entries == ["_entry", "_entry"]
    np.testing.assert_array_equal(first, alone)
    np.testing.assert_array_equal(second, alone)
