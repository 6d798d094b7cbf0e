"""What a worker logs about Redis: state changes once each, bad values rate-limited.

A Redis outage touches every request, so logging per request would flood the log exactly when
it is read; logging nothing (as before) left operators blind. So the log says when Redis stops
answering and when it answers again, when the breaker opens and when it closes; a key holding a
bad value (wrong type, oversized) is named at most once per BAD_VALUE_INTERVAL_S, and at most
BAD_VALUES_PER_INTERVAL keys are named per interval (keys come from clients: user ids); item
rows the live version lost are summed per set and logged, with one of their keys, as often.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable

from app.errors import counted
from app.features.circuit_breaker import State

log = logging.getLogger("app.features.redis_store")

BAD_VALUE_INTERVAL_S = 60.0
BAD_VALUES_PER_INTERVAL = 10
KEYS_REMEMBERED = 1024  # bounds the memory of which keys were named recently


class RedisFaultLog:
    """Not thread-safe: one per RedisStore, on its event loop."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._unreachable: str | None = None  # the reason of the fault being reported
        self._named: OrderedDict[str, float] = OrderedDict()  # key → when it was last named
        self._window_start = -BAD_VALUE_INTERVAL_S
        self._window_named = 0
        self._suppressed = 0
        self._lost: dict[str, int] = {}  # item set → rows lost since it was last logged
        self._lost_logged: dict[str, float] = {}  # item set → when that was

    def failed(self, reason: str) -> None:
        """A call timed out or could not reach Redis."""
        if self._unreachable is None:
            self._unreachable = reason
            log.warning("redis unreachable (%s); serving from the in-process copies", reason)

    def answered(self) -> None:
        """Redis answered a call."""
        if self._unreachable is not None:
            self._unreachable = None
            log.warning("redis answers again")

    def breaker(self, before: State, after: State, reset_seconds: float) -> None:
        """The breaker's state around a call's verdict; a half-open probe failing re-opens an
        already reported breaker, which is not news."""
        if before == "closed" and after == "open":
            log.warning(
                "redis circuit breaker opened: no Redis calls for %g s, then one probe",
                reset_seconds,
            )
        elif before != "closed" and after == "closed":
            log.warning("redis circuit breaker closed: Redis calls resume")

    def rows_lost(self, set_name: str, lost: int, key: str) -> None:
        """Rows of the live version that Redis lacked, served from the snapshot: a summary
        with one of their keys at most once per BAD_VALUE_INTERVAL_S per set (eviction loses
        rows on every request until the version is pushed again)."""
        now = self._clock()
        self._lost[set_name] = self._lost.get(set_name, 0) + lost
        if now - self._lost_logged.get(set_name, -BAD_VALUE_INTERVAL_S) < BAD_VALUE_INTERVAL_S:
            return
        self._lost_logged[set_name] = now
        log.warning(
            "item set %s: %s of its live version absent from Redis or not a string "
            "(MGET reads both as nil; `redis-cli TYPE` tells them apart), e.g. %r; served from "
            "the snapshot. Pushing the live version again rewrites them (ltr features push); "
            "logged again in %g s at the earliest",
            set_name,
            counted(self._lost.pop(set_name), "row"),
            key[:200],
            BAD_VALUE_INTERVAL_S,
        )

    def bad_value(self, key: str, detail: str) -> None:
        """A key holds a value the service cannot use."""
        now = self._clock()
        last = self._named.get(key)
        if last is not None and now - last < BAD_VALUE_INTERVAL_S:
            return
        if now - self._window_start >= BAD_VALUE_INTERVAL_S:
            self._window_start, self._window_named = now, 0
        if self._window_named >= BAD_VALUES_PER_INTERVAL:
            self._suppressed += 1
            return
        self._window_named += 1
        self._named[key] = now
        self._named.move_to_end(key)
        while len(self._named) > KEYS_REMEMBERED:
            self._named.popitem(last=False)
        more, self._suppressed = self._suppressed, 0
        extra = f" ({more} more bad values not logged)" if more else ""
        log.warning(
            "redis key %r holds a bad value: %s; logged again in %g s at the earliest%s",
            key[:200],
            detail,
            BAD_VALUE_INTERVAL_S,
            extra,
        )
