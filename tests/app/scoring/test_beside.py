"""The native beside worker (app.scoring.beside): a compiled scoring call run on its thread, or
taken back by the caller, gives the scorer's own scores bit for bit; a failing caller leaves
nothing posted; the worker stays off the caller's CPU."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from app.artifacts.tree_dump import TreeEnsemble
from app.scoring import beside
from app.scoring.compiled import LANES, CompiledTreeScorer
from app.scoring.compiler import beside_ir as ir
from tests.app.scoring.ensembles import ensemble_and_rows
from tests.support import random_ensemble

pytestmark = pytest.mark.skipif(
    not beside.available(), reason="the beside worker needs Linux and two CPUs"
)


@pytest.fixture(scope="module")
def worker() -> Iterator[beside.BesideWorker]:
    found = beside.BesideWorker(os.sched_getaffinity(0))
    yield found
    found.stop()


def _both(
    worker: beside.BesideWorker,
    first: CompiledTreeScorer,
    second: CompiledTreeScorer,
    x: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, float]:
    prepared = second.prepare(x)
    assert prepared is not None
    here, seconds = worker.run_beside(prepared.call, lambda: first.score(x))
    return here, prepared.scores(), seconds


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ensemble_and_rows())
def test_beside_scores_equal_the_scorer_bit_for_bit(
    worker: beside.BesideWorker, case: tuple[TreeEnsemble, np.ndarray]
) -> None:
    ensemble, rows = case
    scorer = CompiledTreeScorer(ensemble)
    here, there, seconds = _both(worker, scorer, scorer, rows)
    np.testing.assert_array_equal(there, scorer.score(rows))
    np.testing.assert_array_equal(here, there)
    assert seconds >= 0.0


def test_many_calls_in_a_row_each_answer_their_own_rows(worker: beside.BesideWorker) -> None:
    control = CompiledTreeScorer(random_ensemble(20, 60, 5, seed=1))
    candidate = CompiledTreeScorer(random_ensemble(20, 60, 5, seed=2))
    rng = np.random.default_rng(0)
    for size in rng.integers(1, 400, size=300):
        x = rng.standard_normal((int(size), 20)).astype(np.float32)
        here, there, _ = _both(worker, control, candidate, x)
        np.testing.assert_array_equal(here, control.score(x))
        np.testing.assert_array_equal(there, candidate.score(x))


def test_a_stopped_worker_means_the_caller_runs_the_call() -> None:
    stopped = beside.BesideWorker(os.sched_getaffinity(0))
    stopped.stop()
    scorer = CompiledTreeScorer(random_ensemble(8, 20, 4, seed=3))
    x = np.random.default_rng(1).standard_normal((50, 8)).astype(np.float32)
    _, there, seconds = _both(stopped, scorer, scorer, x)
    np.testing.assert_array_equal(there, scorer.score(x))
    assert seconds > 0.0


def test_a_failing_caller_leaves_nothing_posted(worker: beside.BesideWorker) -> None:
    scorer = CompiledTreeScorer(random_ensemble(8, 20, 4, seed=4))
    x = np.random.default_rng(2).standard_normal((100, 8)).astype(np.float32)
    prepared = scorer.prepare(x)
    assert prepared is not None

    def fails() -> np.ndarray:
        raise RuntimeError("control failed")

    with pytest.raises(RuntimeError, match="control failed"):
        worker.run_beside(prepared.call, fails)
    assert worker._box[ir.JOB] != ir.POSTED  # taken back, or run to the end
    _, there, _ = _both(worker, scorer, scorer, x)  # and the next call works
    np.testing.assert_array_equal(there, scorer.score(x))


def test_the_worker_keeps_off_the_callers_cpu(worker: beside.BesideWorker) -> None:
    scorer = CompiledTreeScorer(random_ensemble(8, 20, 4, seed=5))
    x = np.zeros((16, 8), dtype=np.float32)
    _both(worker, scorer, scorer, x)
    assert worker._pinned_away_from not in os.sched_getaffinity(worker._thread_id)


def test_a_model_without_trees_has_no_call() -> None:
    assert CompiledTreeScorer(TreeEnsemble(3, [], base_score=1.5)).prepare(np.zeros((4, 3))) is None
    with pytest.raises(ValueError, match="shape"):
        CompiledTreeScorer(random_ensemble(3, 2, 2)).prepare(np.zeros((4, 5)))


def test_the_ir_has_no_pause_hint_where_the_cpu_has_none() -> None:
    assert "pause" in ir.beside_ir("x86_64")
    assert "aarch64.hint" in ir.beside_ir("aarch64")
    assert "llvm.x86" not in ir.beside_ir("riscv64")


def test_callers_on_two_threads_each_get_their_own_scores(worker: beside.BesideWorker) -> None:
    """One call in flight at a time: a caller that finds another's runs its own itself."""
    scorers = [CompiledTreeScorer(random_ensemble(10, 40, 5, seed=s)) for s in (6, 7)]
    failures: list[str] = []

    def caller(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(150):
            x = rng.standard_normal((int(rng.integers(1, 200)), 10)).astype(np.float32)
            here, there, _ = _both(worker, scorers[0], scorers[1], x)
            if not (
                np.array_equal(here, scorers[0].score(x))
                and np.array_equal(there, scorers[1].score(x))
            ):
                failures.append(f"seed {seed}: wrong scores")

    threads = [threading.Thread(target=caller, args=(seed,)) for seed in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ensemble_and_rows(max_rows=8))
def test_rows_split_with_the_worker_score_as_one_thread(
    worker: beside.BesideWorker, case: tuple[TreeEnsemble, np.ndarray]
) -> None:
    """A request split over two threads (app.scoring.compiled) sends its second half to the
    worker; the pooled thread serves where there is no worker. Both equal one thread."""
    ensemble, rows = case
    big = np.tile(rows, (300 // rows.shape[0] + 1, 1))[: 100 + rows.shape[0] * 17]
    one = CompiledTreeScorer(ensemble).score(big)
    split = CompiledTreeScorer(ensemble, threads=2, parallel_min_rows=LANES)
    for found in (worker, None):
        with mock.patch.object(beside, "ready", lambda found=found: found):
            np.testing.assert_array_equal(split.score(big), one)


def test_a_full_wake_pipe_never_blocks_the_caller() -> None:
    """Wake-ups already pending are enough: with the pipe full (a stopped worker drains
    nothing), a caller still posts, takes its call back and runs it."""
    stopped = beside.BesideWorker(os.sched_getaffinity(0))
    stopped.stop()
    assert not os.get_blocking(stopped._wake_write)
    with contextlib.suppress(BlockingIOError):
        while True:
            os.write(stopped._wake_write, b"\0" * 4096)
    scorer = CompiledTreeScorer(random_ensemble(8, 20, 4, seed=8))
    x = np.random.default_rng(3).standard_normal((40, 8)).astype(np.float32)
    _, there, _ = _both(stopped, scorer, scorer, x)
    np.testing.assert_array_equal(there, scorer.score(x))


def test_stopping_ends_the_worker_whatever_it_was_doing() -> None:
    """Asleep, spinning after a wake-up, or just back from a call: stop() returns."""
    scorer = CompiledTreeScorer(random_ensemble(8, 20, 4, seed=9))
    x = np.zeros((64, 8), dtype=np.float32)
    for round_ in range(20):
        fresh = beside.BesideWorker(os.sched_getaffinity(0))
        if round_ % 2:
            _both(fresh, scorer, scorer, x)
        stopper = threading.Thread(target=fresh.stop)
        stopper.start()
        stopper.join(5.0)
        assert not stopper.is_alive(), f"round {round_}: the worker did not end"
