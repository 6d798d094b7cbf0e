"""A latency budget per /rerank request and admission control in front of the scoring work.

Every request is due `LTR_REQUEST_BUDGET_MS` after it arrived (`x-request-timeout-ms` asks for
another budget). Parsing and scoring are admitted by candidate rows, not by request count: at
most `limit` rows are in flight per worker, the limit adapting to the service time. The default
(`gradient`, after the gradient and Vegas limits of Netflix's concurrency-limits) compares each
service time with what the same rows took when served alone: requests that slow each other
down (one event loop, one GIL: on a CPU-bound worker two at once take twice as long each) shrink
the limit by that inflation, and requests served as fast together as alone let it grow by a
fraction of a request. `aimd` grows additively until one request takes more than half of its
budget, then shrinks by 10 % (Netflix's AIMDLimit); it cannot see that concurrency bought
nothing until the budget is half gone. A request
that does not fit, or arrives in a turn of the event loop that has already admitted one, waits
in a FIFO queue, but only as long as its budget leaves time to be scored (service times are
measured: app.api.service_time), and while the worker sheds for at most
`LTR_ADMISSION_MAX_QUEUE_SHARE` of its budget; when the work ahead of it (the queue and what
is left of the requests in flight) cannot be done in that time it is shed at once (the SRE
book's "shed early, cheaply"). The budget counts from when the loop read the request's first
bytes (app.api.http_protocol).

A shed request never pays for the full parse: `app.api.retrieval_order` finds its candidate
ids with a scan of the raw bytes, and it is answered in the order the retrieval step sent
(`fallback`, as Vespa's degraded coverage) or with 503 + Retry-After.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request

from app import metrics
from app.api.body_marks import BodyMarks, estimated_rows
from app.api.body_scan import scan_body
from app.api.middleware import ARRIVED_STATE
from app.api.request_matrix import RequestError, decode_body
from app.api.service_time import ServiceTime
from app.api.shed_turns import ShedTurns
from app.errors import LtrError
from app.features.redis_store import LookupTime
from app.loop_lag import LoopLag
from app.scoring.cpu_headroom import usable_cores
from app.settings import Settings
from app.thread_pools import thread_pool

T = TypeVar("T")

OVER_BUDGET = "over_budget"  # the budget cannot cover the scoring, queue or not
SHED = "shed"  # admission control refused: the work queued ahead would not drain in time
TIMEOUT_HEADER = "x-request-timeout-ms"
# What the fallback answer needs after the scoring deadline (scan + JSON), per request.
FALLBACK_RESERVE_S = 0.003
DECREASE = 0.9
SLOW_SHARE = 0.5  # service time above this share of the budget: congestion
# gradient: service time over the time alone above which concurrency is judged to cost more
# than it gives (alone includes the loop's other work, such as shedding, hence not 1.1).
CROWDED = 1.5
GROWTH = 0.1  # gradient: at most this share of a request's rows added per fast completion
# An idle worker whose estimate calls a request hopeless lets one in at most this often (a
# doomed probe costs one request's work, cut at its deadline). At 0.5 s, the last probe of
# an overload (doomed) kept 2 light clients after 100 heavy ones refused for the first
# 250-500 ms in 4 runs of 5; at 0.1 s in none, and the open loop at 3x scored as much or
# more (BENCHMARKS.md). Counting from the probe's end instead scored less at 3x.
PROBE_INTERVAL_S = 0.1
EARLY_REFUSAL_WINDOW_S = 0.05  # 503 mode: refuse unread while the last shed is this recent
# Requests parsed and scored on the event loop are admitted together in one turn of the loop
# while their estimated work fits in this share of the budget beyond the loop's lag: with many
# clients a turn reads many requests, and one admission per turn left most of each turn to its
# shed answers. Side by side (100 candidates, 1 worker, 2 vCPUs, alternating runs), scored
# within budget: 64 closed-loop clients (wrk) 589-636 against 357-378 req/s, 200 of them
# 36-95 against 1-2, an open loop at 1,300/s 901-973 against 802-825 (0-0.2 % of answers past
# budget + 20 ms against none) and at 1,000/s all (p50 2 ms against 27 ms, queued one per
# turn). A quarter of the budget scored 257-305 req/s with 200 clients but answered 0.8-1.4 %
# of them past budget + 20 ms (0.1-0.9 % before); a sixteenth gained nothing with 200.
TURN_ROOM_SHARE = 0.125
# While shedding, requests up to this many rows are still scored inline: ~0.3 ms of a 500-tree
# model, less than a hand-back to a busy loop costs them.
CROWDED_INLINE_MAX_ROWS = 128


def _nothing() -> None:
    pass


class Shed(LtrError):
    """The request is answered without scoring; `body` is its raw JSON (for the ids)."""

    def __init__(
        self,
        reason: str,
        body: bytes,
        marks: BodyMarks | None = None,
        retry_may_fit: bool = True,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.body = body
        self.marks = marks  # its quotes and brackets, when admission found them
        # OVER_BUDGET: whether the same request could be scored in time by a worker less busy
        # (its rows alone fit the budget); a 503 says "retry" only then.
        self.retry_may_fit = retry_may_fit


RERANK_PATH = "/rerank"


def is_rerank(scope: Any) -> bool:
    """Whether an HTTP scope is a /rerank request (under the app's root path, if any)."""
    path, root = scope.get("path", ""), scope.get("root_path", "")
    return bool(path == RERANK_PATH or (root and path == root + RERANK_PATH))


@dataclass(frozen=True)
class Budget:
    arrived: float  # time.perf_counter() when the request's headers were complete
    seconds: float

    @property
    def due(self) -> float:
        return self.arrived + self.seconds

    @property
    def scoring_deadline(self) -> float:
        """Until when scoring may run and still leave time for the fallback answer."""
        return self.due - min(FALLBACK_RESERVE_S, self.seconds / 4)


def request_budget(request: Request, settings: Settings) -> Budget:
    """The request's budget from its arrival time (set by the middleware) and header."""
    state = request.scope.get("state", {})
    arrived = state.get(ARRIVED_STATE, time.perf_counter())
    seconds = settings.request_budget_ms / 1000.0
    given = request.headers.getlist(TIMEOUT_HEADER)
    if given:
        # Digits with an optional decimal part only: float() would also take "1_000", "+50",
        # "1e3" or "inf", spellings no client means as a budget. Given twice, which one?
        raw = given[0].strip()
        ms = float(raw) if len(given) == 1 and _DECIMAL.fullmatch(raw) else math.nan
        if not (0 < ms <= settings.max_request_budget_ms):
            raise RequestError(
                ("header", TIMEOUT_HEADER),
                "must be given once, as a decimal number of milliseconds in "
                f"(0, {settings.max_request_budget_ms:g}] (such as 50 or 12.5)",
                "timeout_value",
            )
        seconds = ms / 1000.0
    return Budget(arrived, seconds)


_DECIMAL = re.compile(r"[0-9]{1,16}(?:\.[0-9]{1,16})?")


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


@dataclass
class _Waiter:
    rows: int
    seconds: float  # its estimated service time
    future: asyncio.Future[None]
    on_loop: bool  # parsed and scored on the event loop's thread (a small request)
    cost: float  # what it adds to the queue's drain time (AdmissionController._queue_cost)


@dataclass
class AdmissionController:
    """Rows in flight per worker, the queue in front of them and the adaptive limit.

    Meant for one event loop (no locks): every method runs on the loop.
    """

    settings: Settings
    clock: Callable[[], float] = time.perf_counter
    # The event loop's recent lateness: time a request has likely waited before we saw it.
    loop_lag: LoopLag = field(default_factory=LoopLag)
    limit: float = field(init=False)
    in_flight: int = field(default=0, init=False)
    queued_rows: int = field(default=0, init=False)
    service: ServiceTime = field(default_factory=ServiceTime, init=False)
    # Service times of requests that had the worker to themselves (gradient's baseline).
    alone: ServiceTime = field(default_factory=ServiceTime, init=False)
    # What each request adds to the line at the margin: the time from the previous completion
    # (or its own admission, if later) to its own (see _queue_cost).
    marginal: ServiceTime = field(default_factory=ServiceTime, init=False)
    _last_done: float = field(default=-math.inf, init=False)
    # The last time two or more requests were in flight together.
    _last_shared: float = field(default=-math.inf, init=False)
    # When the requests in flight should be done, served one after another (estimated).
    _busy_until: float = field(default=-math.inf, init=False)
    queued_seconds: float = field(default=0.0, init=False)
    last_shed: float = field(default=-math.inf, init=False)
    _last_probe: float = field(default=-math.inf, init=False)
    _waiters: deque[_Waiter] = field(default_factory=deque, init=False)
    # Shed answers take turns with the loop's other work (app.api.shed_turns).
    shed_turns: ShedTurns = field(default_factory=ShedTurns, init=False)
    core_beside_loop: bool = field(default=True, init=False)
    # The loop that admitted a request in its current turn (None: none did).
    _turn_loop: asyncio.AbstractEventLoop | None = field(default=None, init=False)
    # The estimated work of the requests admitted in the current turn, all served on the loop
    # (inf once one served off it is), and how much a turn may admit (see acquire).
    _turn_work: float = field(default=0.0, init=False)
    _turn_room: float = field(default=0.0, init=False)
    # Called when rows are given back: the reception lanes' fresh lane waits for room
    # (app.api.reception_lanes).
    room_freed: Callable[[], None] = field(default_factory=lambda: _nothing, init=False)

    def __post_init__(self) -> None:
        s = self.settings
        # Fewer workers than cores: a scoring thread has a core beside this worker's loop
        # (with a worker per core, every core runs a loop, and scoring in a thread only added
        # contention: 2 workers at 3x overload on 2 cores, 64 against 86 req/s scored).
        self.core_beside_loop = s.workers < usable_cores()
        initial = min(max(s.admission_initial_rows, s.admission_min_rows), s.admission_max_rows)
        self.limit = float(initial)
        metrics.ADMISSION_LIMIT_ROWS.set(self.limit)

    @property
    def enabled(self) -> bool:
        return self.settings.admission_enabled

    def refuse_early(self, scope: Any) -> str | None:
        """With LTR_OVERLOAD_RESPONSE=503, a /rerank arriving while this busy worker has just
        shed is refused before its body is even read: the cheapest shedding there is."""
        if (
            self.settings.overload_response != "503"
            or not self.enabled
            or not is_rerank(scope)
            or self.in_flight == 0
            or self.clock() - self.last_shed > EARLY_REFUSAL_WINDOW_S
        ):
            return None
        metrics.SHED.labels(SHED).inc()
        return f"overloaded ({SHED}); retry later"

    @property
    def shedding(self) -> bool:
        return self.clock() - self.last_shed < self.settings.shedding_window_seconds

    def has_room(self) -> bool:
        """Whether a request arriving now would be admitted at once, estimates aside: none
        waits for admission and rows are left under the limit."""
        return self.enabled and not self._waiters and self._within_limit(1)

    def estimate(self, rows: int) -> float:
        """Seconds to parse and score a request of `rows` once admitted (measured)."""
        return self.service.estimate(rows)

    def _probe(self, now: float, budget: Budget) -> bool:
        """Whether to let a request the estimate calls hopeless through anyway, to measure
        again: an estimate that only ever refuses would never learn that the machine got
        faster (or that the first, cold request was slow). Only on an idle worker, at most
        every PROBE_INTERVAL_S, and not for a client that asked for less than the default
        budget; its scoring is still cut at the deadline."""
        idle = self.in_flight == 0 and not self._waiters
        default = self.settings.request_budget_ms / 1000.0
        if idle and budget.seconds >= default and now - self._last_probe >= PROBE_INTERVAL_S:
            self._last_probe = now
            return True
        return False

    def _expected(self, rows: int, service: float) -> float:
        """The service time to expect for `rows` admitted now. On an idle worker, what the
        rows took alone if that is less: the estimate also holds the time that overload's
        shedding took from the loop while requests were served, and refusing on it while idle
        would leave the worker shedding with nothing admitted, the estimate never measured
        again (it is, once admitted: a request that still cannot finish is cut at the
        scoring deadline, answered in time)."""
        idle = self.in_flight == 0 and not self._waiters
        if idle and self.alone.measured:
            return min(service, self.alone.estimate(rows))
        return service

    def _refusal(self, budget: Budget, expected: float, hidden: float) -> str:
        """Why a request that cannot be scored in time is refused: SHED when a busy worker
        took its time (work in flight or queued, or a lagging loop), OVER_BUDGET when even
        a whole budget would not cover its work, or its client took the time (a slow send)."""
        if budget.scoring_deadline - budget.arrived < expected:
            return OVER_BUDGET
        busy = self.in_flight > 0 or bool(self._waiters) or self._turn_taken()
        return SHED if busy or hidden >= expected else OVER_BUDGET

    def _turn_taken(self) -> bool:
        """Whether a request was admitted in this turn of the running loop."""
        return self._turn_loop is not None and self._turn_loop is _running_loop()

    def _turn_full(self, seconds: float, on_loop: bool) -> bool:
        """Whether this turn of the loop has no room left for a request of `seconds`."""
        if not self._turn_taken():
            return False
        return not on_loop or self._turn_work + seconds > self._turn_room

    def on_loop(self, rows: int, size: int) -> bool:
        """Whether a request of `rows` and a body of `size` bytes is parsed and scored on the
        event loop's thread (Slot.parses_here and Slot.inline_max_rows, for any company)."""
        return self.small_body(size) and rows <= self.inline_rows(
            self.shedding and self.core_beside_loop
        )

    def small_body(self, size: int) -> bool:
        """Whether a body of `size` bytes is parsed on the event loop whatever else runs."""
        return size < self.settings.parse_off_loop_min_bytes

    def inline_rows(self, crowded: bool) -> int:
        """Up to how many rows a request is scored on the event loop's thread (Slot's)."""
        inline = self.settings.inline_scoring_max_rows
        return min(inline, CROWDED_INLINE_MAX_ROWS) if crowded else inline

    def serving_only(self, rows: int) -> bool:
        """Whether the rows admitted are one request's `rows` alone, none waiting (False
        without admission control: nothing is counted then)."""
        return self.enabled and self.in_flight == rows and not self._waiters

    def _within_limit(self, rows: int) -> bool:
        return self.in_flight == 0 or self.in_flight + rows <= self.limit

    def _fits(self, waiter: _Waiter) -> bool:
        return not self._turn_full(waiter.seconds, waiter.on_loop) and self._within_limit(
            waiter.rows
        )

    async def acquire(self, rows: int, budget: Budget, body: bytes) -> float:
        """Admit `rows`; the admission time. Raises Shed when the budget cannot be met."""
        now = self.clock()
        service = self.estimate(rows)
        # The budget counts from when the loop read the request's first bytes; a saturated
        # loop also leaves requests in their sockets before it reads them: that hidden wait
        # counts against the budget too, which is what makes shedding start while it helps.
        hidden = self.loop_lag.recent
        expected = self._expected(rows, service)
        if now + hidden + expected > budget.scoring_deadline and not self._probe(now, budget):
            reason = self._refusal(budget, expected, hidden)
            raise self._shed(reason, body, fits=self.fits_alone(rows, budget))
        # One admission per turn of the loop, or a few small ones: a turn runs every request
        # the loop read in its last one, and an admitted request's parse and scoring (inline
        # when small) held the loop for all of them, the sockets unread meanwhile. The rest
        # wait in the queue below for the next turn, their waits seen and bounded; the loop
        # reads between them. Requests served on the loop share a turn while their estimated
        # work fits in TURN_ROOM_SHARE of the budget beyond the loop's lag.
        on_loop = self.on_loop(rows, len(body))
        self._turn_room = max(TURN_ROOM_SHARE * budget.seconds - hidden, 0.0)
        within_limit = self._within_limit(rows)
        if not self._waiters and within_limit and not self._turn_full(service, on_loop):
            self._take(rows, service, on_loop)
            return now
        # The work ahead, done one request after another (the event loop parses serially):
        # what is left of the requests in flight when the limit holds this one back (else it
        # waits for the next turn only), then the queue.
        ahead = self.queued_seconds
        if not within_limit:
            # Until rows are given back: the next completion frees a request's, so at most
            # what one adds to the line, not the end of the last one in flight.
            ahead += min(max(self._busy_until - now, 0.0), self._queue_cost(rows, math.inf))
        max_wait = budget.scoring_deadline - now - service
        if self.shedding:
            # Overloaded (this worker has shed lately): a queue as long as the budget only
            # makes every request late, scored or not. A burst on a calm worker may queue
            # for its whole budget.
            max_wait = min(max_wait, self.settings.admission_max_queue_share * budget.seconds)
        if ahead + hidden > max_wait:
            raise self._shed(SHED, body)
        cost = self._queue_cost(rows, service)
        waiter = _Waiter(rows, service, asyncio.get_running_loop().create_future(), on_loop, cost)
        self._waiters.append(waiter)
        self.queued_rows += rows
        self.queued_seconds += cost
        metrics.ADMISSION_QUEUED_ROWS.set(self.queued_rows)
        try:
            await asyncio.wait_for(asyncio.shield(waiter.future), max_wait)
        except TimeoutError:
            if waiter.future.done():  # granted in the same loop turn as the timeout
                self.release(rows, None)
            else:
                waiter.future.cancel()
                self._forget(waiter)
            raise self._shed(SHED, body) from None
        except BaseException:  # the client went away while waiting
            if waiter.future.done() and not waiter.future.cancelled():
                self.release(rows, None)
            else:
                waiter.future.cancel()
                self._forget(waiter)
            raise
        return self.clock()

    def release(
        self,
        rows: int,
        admitted_at: float | None,
        budget_s: float = math.inf,
        done_at: float | None = None,
    ) -> None:
        """Give back `rows`; `admitted_at` (None: not run) and `done_at` (default: now) give
        the service time the model and the limit learn from."""
        if self.in_flight > rows:
            self._last_shared = self.clock()
        self.in_flight -= rows
        if self.in_flight == 0:
            self._busy_until = -math.inf
        if admitted_at is not None and rows > 0:
            end = self.clock() if done_at is None else done_at
            gap = end - max(self._last_done, admitted_at)
            self._last_done = max(self._last_done, end)
            if gap > 0:
                self.marginal.observe(rows, gap)
            self._learn(rows, end - admitted_at, budget_s, self._last_shared < admitted_at)
            if admitted_at == self._last_probe and end - admitted_at <= budget_s:
                # A probe served within its budget: the estimate that called it hopeless is
                # stale (overload's contention has passed), so an idle worker probes again at
                # once rather than one request per interval. Each probe moves the estimate a
                # fifth of the way: one per interval kept a worker refusing 4 light clients for
                # 1-2 s after 200 heavy ones stopped.
                self._last_probe = -math.inf
        self._grant()
        metrics.ADMISSION_IN_FLIGHT_ROWS.set(self.in_flight)
        self.room_freed()

    def _take(self, rows: int, seconds: float, on_loop: bool) -> None:
        now = self.clock()
        loop = _running_loop()
        if loop is not None and self._turn_loop is not loop:
            self._turn_loop = loop
            self._turn_work = 0.0
            loop.call_soon(self._next_turn, loop)
        self._turn_work += seconds if on_loop else math.inf
        if self.in_flight > 0:
            self._last_shared = now
            # Served together: their service times, measured together, hold the overlap; the
            # work in flight is done when the last of them is (adding them up, as for work
            # done one after another, ran away while requests kept overlapping: 0.5-0.85 s
            # ahead with 7 requests of ~60 ms in flight, and requests that fit were shed).
            self._busy_until = max(self._busy_until, now + seconds)
        else:
            self._busy_until = max(self._busy_until, now) + seconds
        self.in_flight += rows
        metrics.ADMISSION_IN_FLIGHT_ROWS.set(self.in_flight)

    def _next_turn(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop's next turn: it has read its sockets since the last admission, so the
        requests it read are in the queue, in order, their waits counted."""
        if self._turn_loop is loop:
            self._turn_loop = None
            self._grant()

    def _forget(self, waiter: _Waiter) -> None:
        try:
            self._waiters.remove(waiter)
        except ValueError:
            return
        self._dequeued(waiter)
        metrics.ADMISSION_QUEUED_ROWS.set(self.queued_rows)
        self._grant()  # a large waiter at the head may have blocked smaller ones

    def _grant(self) -> None:
        while self._waiters and self._fits(self._waiters[0]):
            waiter = self._waiters.popleft()
            self._dequeued(waiter)
            if waiter.future.done():
                continue
            self._take(waiter.rows, waiter.seconds, waiter.on_loop)
            waiter.future.set_result(None)
        metrics.ADMISSION_QUEUED_ROWS.set(self.queued_rows)

    def _queue_cost(self, rows: int, service: float) -> float:
        """How much a request of `rows` adds to the wait of those queued behind it: what each
        completion has lately added to the line (`marginal`), at most its own service time.
        Its service time overstated it wherever requests overlap: with 7-14 requests of 1,000
        rows in flight each took 25-50 ms among the others while one finished every ~4 ms,
        so one waiter ahead was more than the quarter budget a shedding worker lets a request
        queue, and 16 clients sending again once answered kept one worker shedding 43-51 % of
        what it could have scored in time (a held-out trial: 34-66 % with 8 wrk connections)."""
        if self.marginal.measured:
            return min(service, self.marginal.estimate(rows))
        return service

    def _dequeued(self, waiter: _Waiter) -> None:
        self.queued_rows -= waiter.rows
        self.queued_seconds = max(self.queued_seconds - waiter.cost, 0.0)

    def _learn(self, rows: int, seconds: float, budget_s: float, alone: bool) -> None:
        """`alone`: no other request was in flight at any time during this one's service."""
        self.service.observe(rows, seconds)
        if alone:
            self.alone.observe(rows, seconds)
        s = self.settings
        if not s.admission_adaptive:
            return
        slow = seconds > SLOW_SHARE * budget_s
        in_use = self.in_flight + rows >= self.limit / 2
        if s.admission_algorithm == "gradient" and self.alone.measured:
            inflation = seconds / max(self.alone.estimate(rows), 1e-6)
            if slow or inflation > CROWDED:
                # Shrink to what would have been served as fast as alone (Gradient2's
                # limit x minRTT / RTT), by at least AIMD's step.
                self.limit *= min(DECREASE, 1.0 / inflation)
            elif in_use:
                self.limit += min(GROWTH * rows, rows * rows / self.limit)
        elif slow:
            # AIMD (Netflix concurrency-limits' AIMDLimit, with rows for requests): a request
            # whose service took more than SLOW_SHARE of its budget is a sign of congestion;
            # otherwise, when the limit was in use, probe upwards by one request's rows per
            # limit's worth.
            self.limit *= DECREASE
        elif in_use:
            self.limit += rows * rows / self.limit
        self.limit = min(max(self.limit, float(s.admission_min_rows)), float(s.admission_max_rows))
        metrics.ADMISSION_LIMIT_ROWS.set(self.limit)

    def _shed(
        self, reason: str, body: bytes, marks: BodyMarks | None = None, fits: bool = True
    ) -> Shed:
        # Counted in ltr_shed_requests_total once answered shed (app.api.retrieval_order): a
        # request refused here may still get a 422 for its ids or top_k. Only load makes the
        # worker `shedding` (/readyz 503, shorter queues): a request over its budget on an
        # idle worker (too many rows for its budget, or a slow send) is its client's doing,
        # and a client sending `x-request-timeout-ms: 1` kept a pod out of its Service.
        if reason == SHED:
            self.last_shed = self.clock()
        return Shed(reason, body, marks, fits)

    def fits_alone(self, rows: int, budget: Budget, own: int = 0) -> bool:
        """Whether `rows` served alone, on a worker with nothing else to do, take less than
        the budget's scoring window; before any request was measured alone, whether this
        worker has other work now (a trial: 100-candidate requests over budget only because
        of load were told to send fewer candidates). `own`: the rows of this request already
        counted in flight."""
        window = budget.scoring_deadline - budget.arrived
        if self.alone.measured:
            return self.alone.estimate(rows) < window
        return self.in_flight > own or bool(self._waiters)


@dataclass
class Slot:
    """One admitted request: its raw body, budget and rows; released when the request ends."""

    controller: AdmissionController
    body: bytes
    budget: Budget
    rows: int
    admitted_at: float | None
    _held: bool = True
    done_at: float | None = None  # when the scoring finished
    marks: BodyMarks | None = None  # the body's quotes and brackets (for a shed answer)
    # Admitted while this worker was shedding, with a core beside its loop: scored in a
    # thread unless tiny (the inline_max_rows property).
    crowded: bool = False

    @property
    def inline_max_rows(self) -> int:
        """Up to how many rows this request is scored on the event loop's thread rather than
        in a worker thread. While the worker sheds (and has a core beside its loop), only the
        smallest requests: there the loop's time goes to the intake and the shed answers, and
        a thread scores beside it (the native scorer gives the GIL up) where inline scoring
        held the loop ~3 ms per 1,000 rows (1,000-candidate requests at 3x overload, 1 worker
        on 2 vCPUs, alternating point runs: answers' p99 100 against 145 ms, scored within
        budget 58 against 53 req/s)."""
        return self.controller.inline_rows(self.crowded)

    def lookup_time(self) -> LookupTime:
        """What the budget allows the feature-store lookups (Redis): until the scoring
        deadline at most, of which what the estimated scoring does not need may absorb a
        saturated loop's delays (app.features.redis_store); unbounded without admission
        control. Scoring that no longer fits is shed as usual, answered in time."""
        if not self.controller.enabled:
            return LookupTime()
        left = max(self.budget.scoring_deadline - self.controller.clock(), 0.0)
        spare = max(left - self.controller.estimate(self.rows), 0.0)
        return LookupTime(left, spare)

    def parses_here(self, raw: bytes) -> bool:
        """Whether `decoding` parses this body on the event loop: a small one, or one of up
        to LTR_PARSE_ALONE_HERE_MAX_BYTES while its request is the only one admitted."""
        controller = self.controller
        if controller.small_body(len(raw)):
            return True
        return len(raw) <= controller.settings.parse_alone_here_max_bytes and (
            controller.serving_only(self.rows)
        )

    def decoding(self, raw: bytes) -> Awaitable[tuple[dict[str, Any], object]]:
        """(the body's JSON object without `candidates`, the candidates: a JSON value, or
        ScannedCandidates), to await. A large body's parse is already under way in a worker
        thread (the scan runs without the GIL), so the event loop keeps answering probes and
        small requests and can do the request's own other work meanwhile (an in-process item
        lookup); a body that `parses_here` is parsed on the loop when awaited."""
        settings = self.controller.settings
        if self.parses_here(raw):
            return _decoded_here(raw, settings)
        pool = parse_pool(settings.parse_threads)
        return asyncio.get_running_loop().run_in_executor(pool, decode_request, raw, settings)

    async def bounded(self, work: Awaitable[T]) -> T:
        """`work` (the scoring) if it ends before the budget's scoring deadline; else Shed.

        Scoring on the event loop (up to LTR_INLINE_SCORING_MAX_ROWS rows) cannot be stopped,
        so it is awaited directly: a task hop would queue it behind the whole loop backlog.
        Work already started in a thread cannot be stopped either: its rows stay counted until
        it ends, while the client gets the fallback answer now.
        """
        controller = self.controller
        if not controller.enabled:
            return await work
        remaining = self.budget.scoring_deadline - controller.clock()
        if remaining <= 0:
            if asyncio.iscoroutine(work):
                work.close()
            fits = controller.fits_alone(self.rows, self.budget, self.rows)
            raise controller._shed(OVER_BUDGET, self.body, self.marks, fits)
        if self.rows <= self.inline_max_rows:
            result = await work
            self.done_at = controller.clock()
            return result
        task = asyncio.ensure_future(work)
        done, _ = await asyncio.wait({task}, timeout=remaining)
        if task in done:
            self.done_at = controller.clock()
            return task.result()
        self._held = False
        task.add_done_callback(self._late_done)
        fits = controller.fits_alone(self.rows, self.budget, self.rows)
        raise controller._shed(OVER_BUDGET, self.body, self.marks, fits)

    def _late_done(self, task: asyncio.Future[Any]) -> None:
        if not task.cancelled():
            task.exception()  # retrieved: nobody awaits it any more
        self.controller.release(self.rows, self.admitted_at, self.budget.seconds)

    def release(self) -> None:
        """Give the rows back; the service time (admission to scored) teaches the controller,
        and only a request that was scored does."""
        if self._held:
            self._held = False
            admitted = self.admitted_at if self.done_at is not None else None
            self.controller.release(self.rows, admitted, self.budget.seconds, self.done_at)


def parse_pool(threads: int) -> ThreadPoolExecutor:
    """The process's body-decoding threads (LTR_PARSE_THREADS), decodes queued in arrival
    order. Not anyio.to_thread: it yields to the event loop twice before the thread gets the
    work (a checkpoint, then one in its limiter's acquire), and under overload each of those
    turns waits behind the loop's intake and shed answers; run_in_executor hands it over at
    once: with 200 closed-loop clients on a 2-core machine (1,000 candidates, alternating
    runs), goodput 72-83 req/s against 36-60 through anyio; at 3x 48-79 against 48-69
    (docs/OPERATIONS.md). A decode whose client went away runs to its end, unawaited (a scan
    cannot be stopped)."""
    return thread_pool("ltr-parse", threads)


def decode_request(raw: bytes, settings: Settings) -> tuple[dict[str, Any], object]:
    """Slot.decode's result, on this thread."""
    if settings.body_scan:
        scanned = scan_body(raw, settings.max_candidates)
        if scanned is not None:
            return scanned
    doc = decode_body(raw)
    return doc, doc.pop("candidates", None)


async def _decoded_here(raw: bytes, settings: Settings) -> tuple[dict[str, Any], object]:
    return decode_request(raw, settings)


SLOT_STATE = "admission_slot"  # the request state's key for a slot taken before routing


async def admit(controller: AdmissionController, budget: Budget, body: bytes) -> Slot:
    """A slot for the body's rows (held until released), or Shed."""
    marks = BodyMarks.outline(body)
    rows = estimated_rows(marks)
    try:
        admitted_at = await controller.acquire(rows, budget, body)
    except Shed as shed:
        shed.marks = marks
        raise
    crowded = controller.shedding and controller.core_beside_loop
    return Slot(controller, body, budget, rows, admitted_at, marks=marks, crowded=crowded)


async def admitted(request: Request) -> AsyncGenerator[Slot, None]:
    """The /rerank dependency: budget, body, admission; the rows are given back at the end.
    Usually the service middleware admitted the request before routing it
    (app.api.early_admission); then its slot is the one in the request's state."""
    early: Slot | None = request.scope.get("state", {}).get(SLOT_STATE)
    if early is not None:
        try:
            yield early
        finally:
            early.release()
        return
    state = request.app.state
    controller: AdmissionController = state.admission
    settings: Settings = state.settings
    budget = request_budget(request, settings)
    body = await request.body()
    if not controller.enabled:
        yield Slot(controller, body, budget, 0, None, _held=False)
        return
    slot = await admit(controller, budget, body)
    try:
        yield slot
    finally:
        slot.release()


AdmissionDep = Annotated[Slot, Depends(admitted)]
