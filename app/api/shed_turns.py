"""Shed answers given one per turn of the event loop while their budgets allow, so they cannot
crowd out the requests being served.

A request admitted for scoring crosses the event loop several times (its parse and its
scoring run in threads; each hand-back waits for the loop's next turn). Answering a shed
request takes the loop about a millisecond (finding its ids in a 1 MB body), and when every
shed answer was given as soon as its body was in, one turn of the loop held the shed work of
every request that arrived meanwhile: with 20 clients sending again as soon as answered, a turn
took ~25 ms, an admitted request's hand-backs over 100 ms, its measured service time rose past
the budget and everything was shed (goodput 0, bench/results/overload.md).

Here one task gives the shed answers earliest due first (arrival order for the usual shed, made
as soon as the body is in; one shed after waiting in admission's queue arrives with less of its
budget left and goes ahead), one per turn of the loop, so a hand-back waits for one of them,
not for all; and clients that send again as soon as they are answered
(a closed loop: a pool of frontend workers) are slowed by the shed answers, not by the scored
ones. The task answers without yielding while the earliest due is within `urgent_s` of its
due time, or past it, or near enough that the answers queued (each costing what the last ones
took, a moving average) would not all be given by then one per turn: so an answer is given
within its budget when the loop can manage it, and never much after it when the loop cannot.

Late answers once waited their turn too (hurrying one would not make it timely), but with
arrivals that do not wait for answers (an open loop: a frontend's traffic) the loop sheds more
requests than it has turns, and that queue only grew: at 3x the sustainable rate of 1,000-
candidate requests the shed answers' p99 was 0.3-0.9 s, and the bodies they held filled the
worker's buffer cap, so 151-9,938 of 20,000 requests got 503s. Answered as soon as they are
late, p99 was 92-94 ms with no 503 and the same goodput (bench/results/overload.md). Counting
the queue's own work as well, answers past budget + 20 ms fell from a median 7.2 % to 4.4 %
(1,600/s of requests of 10-1,000 candidates with budgets of 50, 100 and 200 ms, five runs). With
clients that send again as soon as they are answered (a closed loop), answering sooner brings
the next request sooner: the worker sheds more and scores less (see docs/OPERATIONS.md).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Any

from app import metrics

URGENT_S = 0.05
COST_WEIGHT = 0.1  # of the latest answer's time in the moving average

# (due, arrival number: equal dues in arrival order, the answer, its request's future)
_Entry = tuple[float, int, Callable[[], Awaitable[Any]], "asyncio.Future[Any]"]


class ShedTurns:
    """Runs `answer()` coroutines one after another in one task. Meant for one event loop."""

    def __init__(self, urgent_s: float = URGENT_S, clock: Callable[[], float] = time.perf_counter):
        self.urgent_s = urgent_s
        self.clock = clock
        self._queue: list[_Entry] = []  # a heap
        self._arrivals = itertools.count()
        self._task: asyncio.Task[None] | None = None
        self._cost = 0.0  # seconds an answer takes, a moving average

    async def run(self, answer: Callable[[], Awaitable[Any]], due: float) -> Any:
        """answer()'s result (or exception), computed in its turn; `due`: when the answer is
        due (on `clock`)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        queued = self.clock()

        async def in_turn() -> Any:
            metrics.SHED_WAIT_SECONDS.observe(max(self.clock() - queued, 0.0))
            return await answer()

        heapq.heappush(self._queue, (due, next(self._arrivals), in_turn, future))
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        while self._queue:
            _, _, answer, future = heapq.heappop(self._queue)
            if not future.done():  # else its request went away
                started = self.clock()
                try:
                    result = await answer()
                except Exception as exc:
                    if not future.done():
                        future.set_exception(exc)
                else:
                    if not future.done():
                        future.set_result(result)
                took = self.clock() - started
                self._cost = (
                    took if not self._cost else self._cost + COST_WEIGHT * (took - self._cost)
                )
            if not self._urgent():
                await asyncio.sleep(0)  # the loop's next turn: what became ready meanwhile runs

    def _urgent(self) -> bool:
        """Whether the earliest due is due soon, or late, counting the queue's work as well."""
        if not self._queue:
            return False
        ahead = len(self._queue) * self._cost
        return self._queue[0][0] - self.clock() <= self.urgent_s + ahead
