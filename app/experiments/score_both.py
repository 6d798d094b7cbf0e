"""An interleaved request's two versions scored on two threads at once.

A compiled tree candidate goes to the native beside worker (app.scoring.beside: no GIL, no
preemption of the caller) with `NativeBeside`. Any other candidate goes through `score_both`:
the calling thread (the event loop's) scores the control while one pooled thread scores the
candidate, unless the calling thread finishes first and finds the candidate not yet started
(the pooled thread not yet woken: 0.1-0.3 ms, more on a virtual machine's idle vCPU), when it
scores it itself and never waits for the pooled thread. Splitting the candidate's rows into
pieces that either thread takes (so that the two finish together) measured slower at 300
rows: 1.22-1.26x a single-model request against 1.19x, each piece a call of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from app.scoring.beside import BesideWorker
from app.scoring.compiled import PreparedScoring, scoring_beside
from app.thread_pools import thread_pool

# Idle cores (app.scoring.cpu_headroom) from which the second thread is worth a try. Lower
# than a row split's: a thread that does not wake in time costs only its hand-off (~30 us),
# as the calling thread then scores the candidate itself.
SPARE_CORE = 0.5


def _beside_pool() -> ThreadPoolExecutor:
    """One thread, since inline scoring blocks the loop (one interleaved request at a time
    uses it). Not the compiled scorer's pool: a candidate scored there could wait on its own
    split's half."""
    return thread_pool("ltr-experiment", 1)


def score_both(
    first: Callable[[], np.ndarray], second: Callable[[], np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """(first(), second()): `first` on this thread, `second` on whichever thread claims it
    first. A failure of `first` leaves an unclaimed `second` unrun and is raised once nothing
    of the request runs any more."""
    unclaimed = [second]  # list.pop is atomic: exactly one thread claims `second`

    def claim() -> np.ndarray | None:
        try:
            job = unclaimed.pop()
        except IndexError:
            return None
        return job()

    def claim_beside() -> np.ndarray | None:
        with scoring_beside():
            return claim()

    beside = _beside_pool().submit(claim_beside)
    try:
        with scoring_beside():  # else the pooled thread could not start until `first` ends
            first_scores = first()
    except BaseException:
        unclaimed.clear()
        beside.exception()  # nothing outlives the request: wait for a `second` under way
        raise
    here = claim()
    return first_scores, here if here is not None else _claimed(beside)


def _claimed(beside: Future[np.ndarray | None]) -> np.ndarray:
    scores = beside.result()
    assert scores is not None  # the pooled thread claimed the job this thread did not
    return scores


@dataclass(frozen=True)
class NativeBeside:
    """A version's scoring prepared as one native call for the beside worker; `observe`
    records what the call took (metrics and the model's cost per row)."""

    worker: BesideWorker
    prepared: PreparedScoring
    observe: Callable[[float], None]

    def run(self, here: Callable[[], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(here(), the prepared scores): `here` on this thread meanwhile."""
        first, seconds = self.worker.run_beside(self.prepared.call, here)
        self.observe(seconds)
        return first, self.prepared.scores()
