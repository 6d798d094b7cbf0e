"""Redis reads for user-cluster features: a deadline on every call, a TTL cache, a breaker.

Redis is a soft dependency: a lookup never waits past its deadline (connecting included),
never raises, and says why it failed so the caller can fall back and report `degraded`.
Keys (Redis contract): `{prefix}user:{user_id}` → cluster id; `{prefix}emb:{model}:{version}`
hash of cluster id → float32 bytes. Values are read with a size bound (GETRANGE for a string,
HSTRLEN before HGET in one script for a hash field), so a huge value someone wrote is a bad
value, answered in one short reply, not a transfer that misses the deadline, counts against
the breaker shared by every user and model, and lands whole in the worker's memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app import metrics
from app.errors import LtrError
from app.features.circuit_breaker import CircuitBreaker, State
from app.features.clusters import MAX_CLUSTER_ID_LENGTH
from app.features.kind_breaker import KindBreaker
from app.features.redis_fault_log import RedisFaultLog
from app.loop_lag import LoopLag
from app.redis_pool import waiting_client
from app.settings import Settings

log = logging.getLogger(__name__)

REDIS_TIMEOUT = "redis_timeout"
# The request's latency budget ran out before Redis answered (no verdict on Redis).
REDIS_OVER_BUDGET = "redis_over_budget"
REDIS_UNAVAILABLE = "redis_unavailable"
CIRCUIT_OPEN = "circuit_open"
REDIS_BAD_VALUE = "redis_bad_value"


@dataclass(frozen=True)
class Fetch:
    """One lookup's outcome: `value` None means absent (or failed, when `error` is set)."""

    value: bytes | None
    error: str | None = None
    cached: bool = False  # from the service's own cache: says nothing of what Redis holds now


class TTLCache:
    """Bounded LRU map whose entries expire `ttl` seconds after they were stored."""

    def __init__(
        self, ttl: float, max_entries: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self._clock = clock
        self._data: OrderedDict[Hashable, tuple[float, Any]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: Hashable) -> tuple[bool, Any]:
        """(found, value); an expired entry is dropped and reported as not found."""
        entry = self._data.get(key)
        if entry is None:
            return False, None
        expires, value = entry
        if self._clock() >= expires:
            del self._data[key]
            return False, None
        self._data.move_to_end(key)
        return True, value

    def put(self, key: Hashable, value: Any, ttl: float | None = None) -> None:
        """Store `value` for `ttl` seconds (default: the cache's)."""
        ttl = self.ttl if ttl is None else min(ttl, self.ttl)
        if self.max_entries <= 0 or ttl <= 0:
            return
        self._data[key] = (self._clock() + ttl, value)
        self._data.move_to_end(key)
        while len(self._data) > self.max_entries:
            self._data.popitem(last=False)

    def clear(self) -> None:
        self._data.clear()

    def discard(self, key: Hashable) -> None:
        self._data.pop(key, None)

    def discard_where(self, predicate: Callable[[Hashable], bool]) -> int:
        """Drop the entries whose key satisfies `predicate`; how many."""
        doomed = [key for key in self._data if predicate(key)]
        for key in doomed:
            del self._data[key]
        return len(doomed)


START_PING_TIMEOUT_S = 0.25


class RedisStore:
    """Cached, deadline-bound, breaker-guarded reads; inert when `settings.redis_url` is unset."""

    def __init__(
        self,
        settings: Settings,
        counters: dict[str, Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.prefix = settings.redis_prefix
        self.deadline_s = settings.redis_deadline_ms / 1000.0
        self.cache = TTLCache(
            settings.redis_cache_ttl_seconds, settings.redis_cache_max_entries, clock
        )
        self.breaker = CircuitBreaker(
            settings.breaker_failure_threshold, settings.breaker_reset_seconds, clock
        )
        self._counters = counters or {}
        self._client: aioredis.Redis | None = None
        self.loop_lag = LoopLag()
        self.liveness = Liveness()
        self.faults = RedisFaultLog(clock)
        self._prober: asyncio.Task[None] | None = None  # PINGs while the breaker is not closed

    @property
    def enabled(self) -> bool:
        return self.settings.redis_url is not None

    async def start(self) -> None:
        """Open the pool and try one PING to warm a connection; Redis being down is fine."""
        if self.settings.redis_url is None or self._client is not None:
            return
        self.loop_lag.start()
        try:
            self._client = waiting_client(
                self.settings.redis_url,
                self.settings.redis_max_connections,
                # No read waits longer for a connection than a request may wait for its answer.
                self.settings.request_budget_ms / 1000.0,
                # asyncio.timeout is the real deadline; these only stop a stray socket wait.
                socket_connect_timeout=max(self.deadline_s * 2, 0.05),
                socket_timeout=max(self.deadline_s * 2, 0.05),
                # A pooled connection that a restarted Redis closed fails at its first use:
                # one immediate retry on a fresh connection, still under the request's
                # deadline. Timeouts are not retried (that would spend the deadline twice).
                retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
                driver_info=None,  # skip CLIENT SETINFO: one round trip less per new connection
            )
        except ValueError as exc:
            # A bad URL must not stop the service: it answers from the artifact, degraded.
            log.error("LTR_REDIS_URL is not a usable Redis URL (%s); Redis stays off", exc)
            return
        metrics.REDIS_CIRCUIT_OPEN.set(0)  # a series from the start, for alerts on its value
        try:
            # Not a request's wait: a worker starting on a busy machine (other workers compiling
            # their kernels) may take longer than the deadline to run its side of the PING.
            async with asyncio.timeout(max(self.deadline_s, START_PING_TIMEOUT_S)):
                await self._client.ping()
        except (TimeoutError, RedisError, OSError) as exc:
            self.faults.failed(f"at start: {type(exc).__name__}")

    async def close(self) -> None:
        if self._prober is not None:
            self._prober.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._prober
            self._prober = None
        await self.loop_lag.stop()
        await self.liveness.settle()
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    def new_deadline(self, lookup: LookupTime | None = None) -> Deadline:
        """One request's Redis budget, shared by its lookups, on Redis time. While Redis is
        seen answering, a saturated event loop may stretch the wall-clock wait to
        WALL_CAP_FACTOR deadlines or to what the request can spare before its scoring; never
        past that (`lookup`: the scoring must still fit; unbounded by default)."""
        lookup = lookup or UNBOUNDED
        now = asyncio.get_running_loop().time()
        stop = now + lookup.spare_s if math.isfinite(lookup.stop_s) else math.inf
        stretch = now + max(WALL_CAP_FACTOR * self.deadline_s, lookup.spare_s)
        return Deadline(now, self.loop_lag.total, self.deadline_s, min(stretch, stop), stop)

    async def get_override(self, user_id: str, deadline: Deadline) -> Fetch:
        """The user's cluster id override; a value longer than any cluster id is REDIS_BAD_VALUE
        and an empty one reads as absent (both mean: no override)."""
        key = f"{self.prefix}user:{user_id}"
        return await self._cached(
            ("user", user_id), deadline, _bounded_get(key, MAX_CLUSTER_ID_LENGTH), key
        )

    async def get_embedding(
        self, model: str, version: str, cluster: str, deadline: Deadline, limit: int
    ) -> Fetch:
        """The cluster's embedding bytes; a field longer than `limit` bytes is
        REDIS_BAD_VALUE, found without reading it."""
        key = f"{self.prefix}emb:{model}:{version}"
        return await self._cached(
            ("emb", model, version, cluster), deadline, _bounded_hget(key, cluster, limit), key
        )

    async def _cached(
        self,
        cache_key: Hashable,
        deadline: Deadline,
        call: Callable[[aioredis.Redis], Awaitable[Any]],
        key: str,
    ) -> Fetch:
        found, value = self.cache.get(cache_key)
        if found:
            self._count("hits" if value is not None else "misses")
            return Fetch(value, cached=True)
        fetch = await self._call(deadline, call, key)
        if fetch.error is None:
            # Absent keys are cached too (most users have no override key), but briefly:
            # a key pushed later must be seen soon.
            ttl = None if fetch.value is not None else self.settings.redis_missing_ttl_seconds
            self.cache.put(cache_key, fetch.value, ttl)
            self._count("hits" if fetch.value is not None else "misses")
        return fetch

    def forget_model(self, model: str) -> None:
        """Drop the cached embeddings of `model` (its vectors were re-pushed or replaced)."""
        self.cache.discard_where(lambda key: isinstance(key, tuple) and key[:2] == ("emb", model))

    async def _call(
        self, deadline: Deadline, call: Callable[[aioredis.Redis], Awaitable[Any]], key: str
    ) -> Fetch:
        raw, error = await self.run(deadline, call, key)
        if error is not None:
            return Fetch(None, error)
        if isinstance(raw, Oversized):
            self._count("errors")
            self.faults.bad_value(key, f"longer than {raw.limit} bytes")
            return Fetch(None, REDIS_BAD_VALUE)
        if raw is not None and not isinstance(raw, bytes):
            raw = str(raw).encode()
        return Fetch(raw)

    async def run(
        self,
        deadline: Deadline,
        call: Callable[[aioredis.Redis], Awaitable[Any]],
        key: str | None = None,
        kind: KindBreaker | None = None,
    ) -> tuple[Any, str | None]:
        """(reply, None) or (None, reason): `call` under the deadline and the breaker, uncached.
        The item feature store sends its pipelined batches through here. `key`: what a bad
        value's log line names; `kind`: a breaker of this kind of call besides the shared one
        (told the same verdicts)."""
        if self._client is None:
            self._count("errors")
            return None, REDIS_UNAVAILABLE
        if kind is not None and not kind.breaker.allow():
            self._count("errors")
            return None, CIRCUIT_OPEN
        if not self.breaker.allow():
            if kind is not None:
                kind.breaker.release_probe()  # not tried: no verdict
            self._count("errors")
            return None, CIRCUIT_OPEN
        raw, error = await self._verdict(self._client, deadline, call, key, kind)
        if error is not None:
            self._count("errors")
        return raw, error

    async def _verdict(
        self,
        client: aioredis.Redis,
        deadline: Deadline,
        call: Callable[[aioredis.Redis], Awaitable[Any]],
        key: str | None,
        kind: KindBreaker | None = None,
    ) -> tuple[Any, str | None]:
        """run's call, the breakers allowing it, and what its outcome tells them."""
        started = self.breaker.now()
        try:
            raw = await _within_redis_deadline(call(client), deadline, self.loop_lag, self.liveness)
        except LoopLagTimeout:
            self._no_verdict(kind)  # the loop was late: no verdict on Redis
            return None, REDIS_TIMEOUT
        except BudgetTimeout:
            self._no_verdict(kind)  # the request ran out of time: no verdict on Redis
            return None, REDIS_OVER_BUDGET
        except (TimeoutError, RedisTimeoutError):
            return None, self._failed(REDIS_TIMEOUT, started, kind)
        except ResponseError as exc:
            # Redis answered (so it is healthy) but the key holds the wrong type of value.
            self._answered(kind)
            self.faults.bad_value(key or "(a batch of item keys)", str(exc))
            return None, REDIS_BAD_VALUE
        except (RedisError, OSError):
            return None, self._failed(REDIS_UNAVAILABLE, started, kind)
        self._answered(kind)
        self.liveness.replied()
        return raw, None

    def _no_verdict(self, kind: KindBreaker | None) -> None:
        self.breaker.release_probe()
        if kind is not None:
            kind.breaker.release_probe()

    def _answered(self, kind: KindBreaker | None = None) -> None:
        before = self.breaker.state
        self.breaker.record_success()
        self.faults.answered()
        self._breaker_moved(before)
        if kind is not None:
            kind.record(success=True)

    def _failed(self, reason: str, started: float, kind: KindBreaker | None = None) -> str:
        before = self.breaker.state
        self.breaker.record_failure(started)
        self.faults.failed(reason)
        self._breaker_moved(before)
        if kind is not None:
            kind.record(success=False, started=started)
        return reason

    def _breaker_moved(self, before: State) -> None:
        """Logs and exposes a change of the breaker's state (open and half-open count as open:
        no call goes out but a probe until Redis answers one)."""
        after = self.breaker.state
        self.faults.breaker(before, after, self.breaker.reset_seconds)
        if (before == "closed") != (after == "closed"):
            metrics.REDIS_CIRCUIT_OPEN.set(0 if after == "closed" else 1)
        if after != "closed" and (self._prober is None or self._prober.done()):
            self._prober = asyncio.get_running_loop().create_task(self._probe_until_closed())

    async def _probe_until_closed(self) -> None:
        """A PING whenever the breaker's open period ends and no request is probing, until Redis
        answers one. Otherwise only a request reading Redis probes, and a worker serving none
        (models without Redis features) kept ltr_redis_circuit_open at 1 long after Redis was
        back, which the alert on it read as an outage. Not a lookup: not counted as one."""
        breaker = self.breaker
        while True:
            await asyncio.sleep(max(breaker.open_left(), self.deadline_s))
            client = self._client
            if client is None or breaker.state == "closed":
                return
            if breaker.allow():  # else a request's call is the probe
                await self._verdict(client, self.new_deadline(), _ping, "PING")

    def _count(self, what: str) -> None:
        counter = self._counters.get(what)
        if counter is not None:
            counter.inc()


@dataclass(frozen=True)
class Oversized:
    """A bounded read's reply: the value is longer than `limit` bytes."""

    limit: int


async def _ping(client: aioredis.Redis) -> Any:
    return await client.ping()


def _bounded_get(key: str, limit: int) -> Callable[[aioredis.Redis], Awaitable[Any]]:
    """GET of `key`, reading at most limit + 1 bytes of it: the value, None when absent or
    empty (GETRANGE answers "" for both; neither is a usable value), Oversized past `limit`.
    A key of another type fails with WRONGTYPE, as GET does."""

    async def call(client: aioredis.Redis) -> Any:
        head = await client.getrange(key, 0, limit)
        if not head:
            return None
        return Oversized(limit) if len(head) > limit else head

    return call


# HSTRLEN then HGET, atomically and in one round trip; an integer reply is the length of a
# field past the limit (an absent field has length 0 and HGET's nil reply).
_BOUNDED_HGET = """
local size = redis.call('HSTRLEN', KEYS[1], ARGV[1])
if size > tonumber(ARGV[2]) then return size end
return redis.call('HGET', KEYS[1], ARGV[1])
"""


def _bounded_hget(key: str, field: str, limit: int) -> Callable[[aioredis.Redis], Awaitable[Any]]:
    """HGET of `field` in hash `key` unless it is longer than `limit` bytes (Oversized then,
    and not transferred). A key of another type fails with WRONGTYPE, as HGET does."""

    async def call(client: aioredis.Redis) -> Any:
        reply = await client.eval(_BOUNDED_HGET, 1, key, field, str(limit))
        return Oversized(limit) if isinstance(reply, int) else reply

    return call


SETTLE_TURNS = 2  # event-loop turns that let a reply already in the socket be read
# The loop lagged during a wait when the lag it accrued reaches this share of the deadline.
# The sampler sees only part of a saturated loop's backlog (a reply waits a whole turn after
# the tick that measured it), so the share is low: half the deadline left 8-18 % of lookups
# blamed on a Redis whose PINGs from another process never took 10 ms. An idle loop accrues
# up to 1.0 ms per 10 ms (uvloop; 1.7 ms with asyncio's own loop), below this share, so a slow
# Redis on an idle worker is still blamed at its deadline.
LAGGING_SHARE = 0.2
WALL_CAP_FACTOR = 3.0  # a saturated loop may stretch the lookups to this many deadlines, no more


class Liveness:
    """When Redis last answered a call (event-loop time), late replies included: the proof
    that Redis is alive while a saturated loop leaves replies unread past their deadline."""

    def __init__(self) -> None:
        self.last_reply = -math.inf
        self.late: set[asyncio.Future[Any]] = set()  # calls past their deadline, still going

    def replied(self) -> None:
        self.last_reply = asyncio.get_running_loop().time()

    def since(self, moment: float) -> bool:
        return self.last_reply >= moment

    def outlive(self, task: asyncio.Future[Any]) -> None:
        """`task`, a call nobody waits for any more, finishes in the background; its reply
        counts, and `settle` ends it if it is still going when the store closes."""
        self.late.add(task)
        task.add_done_callback(self.note_late)

    def note_late(self, task: asyncio.Future[Any]) -> None:
        """Done callback of a call nobody waits for any more."""
        self.late.discard(task)
        if not task.cancelled() and task.exception() is None:
            self.replied()

    async def settle(self) -> None:
        """Cancel and reap the calls still going: closing the store, nothing will read them
        (left, they were destroyed pending when their event loop closed)."""
        late, self.late = list(self.late), set()
        for task in late:
            task.cancel()
        await asyncio.gather(*late, return_exceptions=True)


@dataclass(frozen=True)
class LookupTime:
    """What a request's latency budget allows its store lookups, in seconds from now: its
    scoring deadline is `stop_s` away, and `spare_s` of that is not needed for the scoring
    (estimated), so the lookups must end within it."""

    stop_s: float = math.inf
    spare_s: float = 0.0


UNBOUNDED = LookupTime()


@dataclass(frozen=True)
class Deadline:
    """One request's Redis budget: `seconds` of Redis time from `start` (event-loop time),
    Redis time being wall time minus the event-loop lag accrued since `lag_start`."""

    start: float
    lag_start: float
    seconds: float
    wall_stop: float = math.inf  # event-loop time a late loop may stretch the wait to
    stop: float = math.inf  # event-loop time by which the request's scoring must start


class LoopLagTimeout(LtrError, TimeoutError):
    """The wall-clock cap passed while the event loop, not Redis, was late."""


class BudgetTimeout(LtrError, TimeoutError):
    """The request's latency budget ran out before Redis's deadline did."""


async def _within_redis_deadline(
    work: Awaitable[Any], deadline: Deadline, lag: LoopLag, liveness: Liveness
) -> Any:
    """`work`'s result, or TimeoutError when Redis missed the deadline (LoopLagTimeout when
    the event loop's backlog, not Redis, made the wait too long).

    On a saturated event loop the reply sits in the socket, unread, while other requests run:
    a plain timeout would blame Redis for the loop's backlog and open the breaker. So the
    deadline is on Redis time, the wall time since the request's lookups began minus the
    event-loop lag accrued meanwhile (LoopLag), and before it is declared missed the loop gets
    a turn to read what has arrived. On an idle loop the two clocks agree and a slow Redis
    times out at the deadline, as before. The lag sampler sees only part of a saturated
    loop's backlog, so when the loop lagged and Redis answered some call since this wait
    began (`liveness`), the verdict waits until `deadline.wall_stop` and blames the loop
    (LoopLagTimeout); a Redis that answers nothing gets the blame at its deadline, so the
    breaker still opens on a hung Redis under load. Nothing waits past `deadline.stop`, when
    the request's scoring must start (BudgetTimeout: the answer goes out without the value,
    and Redis gets no blame).

    A call that timed out is not cancelled: redis-py drops a connection whose reply was not
    read, and reconnecting on a busy machine misses the next deadline too, a vicious circle.
    It finishes in the background (bounded by the client's socket timeout) and its connection
    goes back to the pool; its late reply still counts as a sign of life.
    """
    loop = asyncio.get_running_loop()
    wall_stop = deadline.wall_stop
    if not math.isfinite(wall_stop):
        wall_stop = deadline.start + WALL_CAP_FACTOR * deadline.seconds

    def redis_time() -> float:
        return (loop.time() - deadline.start) - (lag.total - deadline.lag_start)

    def forgiven() -> bool:
        lagged = lag.total - deadline.lag_start >= LAGGING_SHARE * deadline.seconds
        return lagged and liveness.since(deadline.start)

    def redis_late() -> bool:
        return redis_time() >= deadline.seconds and not forgiven()

    def over() -> bool:
        return loop.time() >= min(wall_stop, deadline.stop)

    task = asyncio.ensure_future(work)
    try:
        while True:
            if not redis_late() and not over():
                left = deadline.seconds - redis_time()
                if left <= 0:  # forgiven: look again a deadline later
                    left = deadline.seconds
                timeout = min(left, min(wall_stop, deadline.stop) - loop.time())
                done, _ = await asyncio.wait({task}, timeout=timeout)
                if done:
                    return task.result()
            for _ in range(SETTLE_TURNS):  # the reply may be in the socket, or the lag unseen
                await asyncio.sleep(0)
                if task.done():
                    return task.result()
            if redis_late() or over():
                break
        liveness.outlive(task)
        if loop.time() >= deadline.stop:
            raise BudgetTimeout
        if redis_late():
            raise TimeoutError
        raise LoopLagTimeout
    except asyncio.CancelledError:
        task.cancel()  # the request itself was cancelled (client gone)
        raise
