"""Which large request bodies a worker reads at once, and in what order, when many arrive
together.

uvloop reads every socket that has data on each turn of the event loop, so when many large
bodies arrive at once each advances by a socket read per turn, and each takes as long to arrive
as all of them together. With 200 clients sending 1,000-candidate requests (1 MB) to one worker,
a body took longer from its first bytes to its last than the whole latency budget, and admission
shed every request: none was scored (bench/results/overload.md).

Here (when enabled) a body that does not come with its request's head is read in a lane: a
few such bodies are read at once, and the others wait in their sockets (TCP's flow control
holds their clients back), their heads read, so that their budgets count from then. When lanes
are free:

- the fresh lane takes the newest waiting request, only while admission has room to score one
  now: a request that has just arrived can still meet its budget. Serving the newest first
  under overload is Facebook's adaptive LIFO (Maurer, "Fail at Scale", ACM Queue 13(8), 2015);
- the `oldest_slots` other lanes take the oldest waiting requests, most likely to be shed, so
  that no request waits behind ever newer ones.

A body's arrival takes several turns of its client as well as of the loop (a socket holds a
few hundred KB), so lanes read fewer bodies a second than reading them all at once does. With
clients that send again as soon as they are answered that costs nothing (they send no more
than is answered) and scoring some beats scoring none: 200 such clients sending 1,000-candidate
requests got 76-80 against 0.1 req/s scored on one worker, 133 against 6.5 on two (alternating
15 s runs on a 2-vCPU VM). Traffic that does not wait for answers (a frontend's open loop)
outruns them once it passes what the worker can read and shed: at 870/s on one worker (3x a
sustainable 290/s) requests waited the whole `max_wait_s` and the bodies let in together then
filled the buffer cap: 2,849-2,938 of 13,050 answers 503 and 2.4-3.1 req/s scored, against
0-680 answers 503 and 0.2-20.5 req/s with every body read at once (three runs each; four lanes
adding one per overdue request did no better: 1,786 answers 503). Hence opt-in
(`LTR_RECEPTION_LANES`): for callers that are a pool of synchronous workers. A request waits
at most `max_wait_s`, past which it reads on outside the lanes: it is long past its budget,
and holding it only delays its answer.

A lane is held for at most `slice_s`: a body whose bytes come slowly (a slow network, a stalled
upload) then reads on outside the lanes, as every body did before, and the lane goes on to the
next, so a slow client delays the others by a slice at most. While few bodies arrive at once,
each gets a lane as it comes and nothing changes.

Meant for one event loop (no locks): every method runs on the loop.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

from app import metrics


class Reader(Protocol):
    """A connection whose request body is being received (app.api.http_protocol)."""

    def resume_body(self) -> None:
        """Read the body on from the socket (it was paused to wait for a lane)."""


_Lanes = dict[Reader, asyncio.TimerHandle]  # a reader: the timer that ends its slice


class ReceptionLanes:
    def __init__(
        self,
        oldest_slots: int = 4,
        slice_s: float = 0.01,
        max_wait_s: float = 0.2,
        clock: Callable[[], float] = time.perf_counter,
        enabled: bool = True,
    ) -> None:
        self.enabled = enabled
        self.oldest_slots = oldest_slots
        self.slice_s = slice_s
        self.max_wait_s = max_wait_s
        self.clock = clock
        # Whether admission could score a request now (app.api.admission): set by the app.
        self.room: Callable[[], bool] = lambda: False
        self._fresh: _Lanes = {}  # one lane at most
        self._oldest: _Lanes = {}
        self._waiting: deque[tuple[Reader, float]] = deque()  # (reader, since), oldest first
        self._overdue_timer: asyncio.TimerHandle | None = None

    def configure(
        self,
        enabled: bool,
        oldest_slots: int,
        slice_s: float,
        max_wait_s: float,
        room: Callable[[], bool],
    ) -> None:
        self.enabled = enabled
        self.oldest_slots = oldest_slots
        self.slice_s = slice_s
        self.max_wait_s = max_wait_s
        self.room = room

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def enter(self, reader: Reader) -> bool:
        """Whether `reader` may read its body now; if not, it waits (the caller stops reading
        its socket) until its `resume_body()` is called."""
        if not self.enabled:
            return True
        if not self._fresh and self.room():
            self._take(self._fresh, reader)
            return True
        if len(self._oldest) < self.oldest_slots:
            self._take(self._oldest, reader)
            return True
        self._waiting.append((reader, self.clock()))
        metrics.RECEPTION_WAITING.set(len(self._waiting))
        self._arm_overdue()
        return False

    def leave(self, reader: Reader) -> None:
        """`reader`'s body is in, or it was answered or went away: its lane, if it held one,
        goes on to the next. A waiting reader leaves the queue and reads on."""
        for lanes in (self._fresh, self._oldest):
            if reader in lanes:
                lanes.pop(reader).cancel()
                self.kick()
                return
        for entry in self._waiting:
            if entry[0] is reader:
                self._waiting.remove(entry)
                break
        else:
            return  # it never waited (or was let in already)
        metrics.RECEPTION_WAITING.set(len(self._waiting))
        reader.resume_body()

    def kick(self) -> None:
        """Fills free lanes from the waiting: called when a lane frees up, and when admission
        gets room to score (the fresh lane waits for it)."""
        waiting = self._waiting
        if not waiting:
            return
        if not self._fresh and self.room():
            self._let_in(self._fresh, waiting.pop()[0])
        while waiting and len(self._oldest) < self.oldest_slots:
            self._let_in(self._oldest, waiting.popleft()[0])
        metrics.RECEPTION_WAITING.set(len(waiting))

    def _let_in(self, lanes: _Lanes, reader: Reader) -> None:
        self._take(lanes, reader)
        reader.resume_body()

    def _take(self, lanes: _Lanes, reader: Reader) -> None:
        lanes[reader] = asyncio.get_running_loop().call_later(
            self.slice_s, self._slice_over, lanes, reader
        )

    def _slice_over(self, lanes: _Lanes, reader: Reader) -> None:
        """A body still coming after its slice reads on outside the lanes."""
        if lanes.pop(reader, None) is not None:
            metrics.RECEPTION_SLICES_OVER.inc()
            self.kick()

    def _arm_overdue(self) -> None:
        if self._overdue_timer is None and self._waiting:
            due = self._waiting[0][1] + self.max_wait_s - self.clock()
            loop = asyncio.get_running_loop()
            self._overdue_timer = loop.call_later(max(due, 0.0), self._let_overdue_in)

    def _let_overdue_in(self) -> None:
        """The requests that waited `max_wait_s` read on outside the lanes."""
        self._overdue_timer = None
        now = self.clock()
        waiting = self._waiting
        while waiting and now - waiting[0][1] >= self.max_wait_s:
            metrics.RECEPTION_OVERDUE.inc()
            waiting.popleft()[0].resume_body()
        metrics.RECEPTION_WAITING.set(len(waiting))
        self._arm_overdue()


# The worker's lanes: one event loop per worker process. The app configures them
# (app.main, `LTR_RECEPTION_LANES`); the HTTP protocol uses them.
LANES = ReceptionLanes(enabled=False)
