"""What a worker logs about Redis: state changes once each, bad values rate-limited.

A Redis outage touches every request, so logging per request would flood the log exactly when
it is read; logging nothing (as before) left operators blind. So the log says when Redis stops
answering and when it answers again, when the breaker opens and when it closes; a key holding a
bad value (wrong type, oversized) is named at most once per BAD_VALUE_INTERVAL_S, and at most
BAD_VALUES_PER_INTERVAL keys are named per interval (keys come from clients: user ids); item
rows the live version lost are summed per set and logged, with one of their keys, as often.
An item set with no live version in Redis, or a served version's user embeddings missing there
(a restart without persistence, FLUSHALL, eviction), is logged once when that starts and once
when it ends, per set and per version. An outage that starts within FLAP_QUIET_S of the last
one's end is logged only if it lasts FLAP_LOG_AFTER_S (and its end then); the next line logged
says how many such brief ones went unlogged (a soak trial on a saturated host: 1-15 % of
1,000-row lookups timing out, 1,932 lines in 55 minutes).
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
FLAP_QUIET_S = 60.0
FLAP_LOG_AFTER_S = 5.0


class RedisFaultLog:
    """Not thread-safe: one per RedisStore, on its event loop."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._unreachable: str | None = None  # the reason of the fault being reported
        self._outage_start = 0.0
        self._recovered_at = -FLAP_QUIET_S  # when the last outage ended
        self._quiet = False  # the outage going on is a brief one not logged (yet)
        self._brief = 0  # brief outages not logged since the last line
        self._named: OrderedDict[str, float] = OrderedDict()  # key → when it was last named
        self._window_start = -BAD_VALUE_INTERVAL_S
        self._window_named = 0
        self._suppressed = 0
        self._lost: dict[str, int] = {}  # item set → rows lost since it was last logged
        self._lost_logged: dict[str, float] = {}  # item set → when that was
        # What a served model needs and Redis lacks (an item set's live version, a version's
        # embeddings) → since when.
        self._absent: dict[str, float] = {}

    def failed(self, reason: str) -> None:
        """A call timed out or could not reach Redis."""
        now = self._clock()
        if self._unreachable is None:
            self._unreachable, self._outage_start = reason, now
            self._quiet = now - self._recovered_at < FLAP_QUIET_S
            if not self._quiet:
                self._report_unreachable(reason, "")
        elif self._quiet and now - self._outage_start >= FLAP_LOG_AFTER_S:
            self._quiet = False  # a brief one that lasted: said, and its end will be
            self._report_unreachable(reason, f" for {now - self._outage_start:.0f} s")

    def _report_unreachable(self, reason: str, lasting: str) -> None:
        brief, self._brief = self._brief, 0
        log.warning(
            "redis unreachable%s (%s); serving from the in-process copies%s",
            lasting,
            reason,
            f" ({counted(brief, 'brief outage')} since the last report not logged)"
            if brief
            else "",
        )

    def answered(self) -> None:
        """Redis answered a call."""
        if self._unreachable is not None:
            self._unreachable = None
            self._recovered_at = self._clock()
            if self._quiet:
                self._brief += 1
            else:
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

    def set_missing(self, set_name: str, pointer: str) -> None:
        """Redis answered, but the set has no live version: every request of its models is
        served from the snapshot until it is pushed again, which nobody may notice otherwise
        (the state logged nothing)."""
        self._gone(
            f"item set {set_name}",
            "item set %s has no live version in Redis (%r is absent or names a version whose "
            "meta is gone: a restart without persistence, FLUSHALL or eviction?); its models "
            "serve from their snapshots, degraded (item_set_missing_in_redis), until it is "
            "pushed again: `ltr redis restore` restores what the registry's deployed versions "
            "need; logged again when it is back",
            set_name,
            pointer[:200],
        )

    def set_present(self, set_name: str) -> None:
        """The set has a live version again (a request read it)."""
        self._back(f"item set {set_name}", "is live in Redis again")

    def embeddings_missing(self, model: str, version: str, key: str) -> None:
        """Redis answered, but holds no embedding for a served version's cluster: its user
        features come from the artifact's copy, degraded, until they are pushed again."""
        self._gone(
            f"embeddings of {model}/{version}",
            "user embeddings of %s/%s are missing in Redis (%r: a restart without persistence, "
            "FLUSHALL, eviction, or a publish without a Redis URL?); served from the model's "
            "own copy, degraded (embedding_missing_in_redis), until pushed again: `ltr redis "
            "restore` restores what the registry's deployed versions need; logged again when "
            "they are back",
            model,
            version,
            key[:200],
        )

    def embeddings_present(self, model: str, version: str) -> None:
        self._back(f"embeddings of {model}/{version}", "are in Redis again")

    def _gone(self, what: str, message: str, *args: object) -> None:
        """Log `message` once when `what` goes missing (not again until it is back)."""
        if what in self._absent or len(self._absent) >= KEYS_REMEMBERED:  # names from models
            return
        self._absent[what] = self._clock()
        log.warning(message, *args)

    def _back(self, what: str, state: str) -> None:
        since = self._absent.pop(what, None) if self._absent else None
        if since is not None:
            log.warning("%s %s after %.0f s", what, state, self._clock() - since)

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
