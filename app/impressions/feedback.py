"""The serving side of the click loop: log what `/rerank` served, accept feedback on it.

`ImpressionLog.log_rerank` indexes the served ids of a request in-process and queues the
impression record; `record_feedback` checks a feedback call against the served ids (the
in-process index first, then Redis `{prefix}imp:{request_id}`, so any replica can answer once
the record is flushed), drops duplicates (same request id + candidate + event type, counted once:
a Redis hash `{prefix}fbseen:{request_id}` across replicas, the in-process index otherwise) and
queues the new events. Without Redis a feedback call must reach the process that served the
request, within the last LOCAL_INDEX_MAX requests, `impressions_index_max_mb` of served ids
and `impressions_ttl_seconds`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
from redis.exceptions import RedisError

from app.errors import LtrError, clipped
from app.features.redis_store import TTLCache
from app.impressions.served_ring import ServedRing
from app.impressions.sink import (
    DROPPED,
    ImpressionSink,
    RedisStreamWriter,
    Writer,
    feedback_record,
    impression_record,
    make_writer,
)
from app.log_throttle import Throttle, held_note
from app.settings import Settings

log = logging.getLogger(__name__)

EVENT_TYPES = ("click", "purchase", "dwell")
LOCAL_INDEX_MAX = 50_000  # requests remembered in-process (their ids and the feedback seen)
LOOKUP_TIMEOUT_S = 1.0  # feedback is not latency-critical, but must not hang on a stuck Redis
# The replica that served a request writes its record to Redis with its sink's next batch, a
# few milliseconds after the answer (tens under load): feedback sent at once to another
# replica came first and was a 404 (4-15 % of such calls in an upgrade trial). An id Redis
# lacks is looked up again for this long before it is called unknown.
# Looked up again after 10, 20, 40... ms: 7 GETs at most for an id nobody served.
RECORD_GRACE_S = 0.5
RECORD_FIRST_POLL_S = 0.01


LOGGING_OFF = (
    "impression logging is off: it needs LTR_IMPRESSIONS_ENABLED=true and a sink, "
    "LTR_REDIS_URL or LTR_IMPRESSIONS_JSONL"
)


SINK_FAILING = (
    "the impression log cannot be written now, so feedback is not recorded; retry later "
    "(the service log says why)"
)


class FeedbackError(LtrError):
    """A feedback call that cannot be accepted; `status` is the HTTP answer."""

    status = 422


class UnknownRequest(FeedbackError):
    status = 404


class FeedbackUnavailable(FeedbackError):
    status = 503


@dataclass
class Served:
    """What one request served: its ids and the (id, type) feedback already recorded.

    The ids are kept as the JSON list they were served as, in the worker's ServedRing (a set of
    1,000 short strings held 96 KB, so 50,000 requests held 4.8 GB per worker)."""

    ring: ServedRing
    span: tuple[int, int]
    seen: set[tuple[Any, str]] = field(default_factory=set)
    # Read from Redis's record, which the first replica to log the request id wrote (SET NX):
    # the impression every replica and `ltr dataset` refer to. A replica's own entry is not
    # that when another replica served the same id first.
    shared: bool = False
    # This replica's impression reached the sink (Redis): from then on Redis, not this entry,
    # says whether it exists (a Redis restarted empty lost it).
    written: bool = False
    # Dropped by a failed write: no feedback on it can ever label anything.
    lost: bool = False

    @property
    def alive(self) -> bool:
        return self.ring.holds(self.span)

    @property
    def ids(self) -> set[Any]:
        """Decoded for each feedback call (tens of microseconds), not kept; empty once the
        ring has overwritten them."""
        encoded = self.ring.get(self.span)
        return set() if encoded is None else set(orjson.loads(encoded))


def _seen_field(candidate: Any, kind: str) -> bytes:
    return kind.encode() + b"\x1f" + orjson.dumps(candidate)


class ImpressionLog:
    """Inert (every call a no-op, feedback answered 503) unless impressions are enabled and a
    sink (Redis or a JSONL path) is configured."""

    def __init__(self, settings: Settings, writer: Writer | None = None) -> None:
        self.settings = settings
        if writer is None and settings.impressions_enabled:
            writer = make_writer(settings)
            if writer is None:
                log.warning(
                    "LTR_IMPRESSIONS_ENABLED is set but neither LTR_REDIS_URL nor "
                    "LTR_IMPRESSIONS_JSONL: impressions are not logged"
                )
        size = settings.impressions_queue_size
        self.sink = (
            None
            if writer is None
            else ImpressionSink(writer, size, max_bytes=settings.impressions_queue_max_mb * 2**20)
        )
        self.redis = writer.lookups if isinstance(writer, RedisStreamWriter) else None
        self.prefix = settings.redis_prefix
        self.ttl = settings.impressions_ttl_seconds
        self.index = TTLCache(float(self.ttl), LOCAL_INDEX_MAX)
        self.ring = ServedRing(settings.impressions_index_max_mb * 2**20)
        self._refusals = Throttle()
        if self.sink is not None:
            self.sink.on_batch = self._batch_done

    @property
    def enabled(self) -> bool:
        return self.sink is not None

    async def start(self) -> None:
        if self.sink is not None:
            await self.sink.start()

    async def close(self) -> None:
        if self.sink is not None:
            await self.sink.close()

    def log_rerank(
        self,
        body: dict[str, Any],
        query_id: str | int | None,
        user_id: str | None,
        user_cluster: str | None,
        ids: list[Any],
        features: np.ndarray,
    ) -> None:
        """Queue the impression of a /rerank answer. `body` is the answer before `_order` (input
        index of each result, best first) is removed; `features` [n_candidates, n_features] in
        input order. Never raises and never waits."""
        if self.sink is None:
            return
        try:
            order = body["_order"]
            served = [ids[i] for i in order]
            encoded = orjson.dumps(served)
            request_id = body["request_id"]
            model = body["model"]
            record = impression_record(
                request_id,
                query_id,
                user_id,
                user_cluster,
                model["name"],
                model["version"],
                served,
                features[order],
                experiment=body.get("_experiment"),
                explored=body.get("_explored"),
            )
        except Exception:  # a logging bug must not fail the request
            log.exception("could not build an impression record")
            DROPPED.labels("impression", "encode_error").inc()
            return
        # A request id used again keeps its first impression, as `ltr dataset` does: feedback
        # on it refers to what was first served under it.
        size = int(features.nbytes) + len(encoded)
        if self.sink.submit(record, size) and not self.index.get(request_id)[0]:
            span = self.ring.add(encoded)
            if span is not None:
                self.index.put(request_id, Served(self.ring, span))

    def _batch_done(self, batch: list[dict[str, Any]], written: bool) -> None:
        """A trial: impressions dropped by a failed write (Redis down) stayed known here, so
        feedback on them was acknowledged (202) after Redis came back, and could never label
        anything (`feedback_orphans_no_impression`). Dropped: marked lost (feedback on them is
        a 404 saying so); written: Redis is the authority."""
        for record in batch:
            if record.get("kind") != "impression":
                continue
            request_id = record.get("request_id")
            _, local = self.index.get(request_id)
            if not isinstance(local, Served) or local.shared:
                continue
            if written:
                local.written = True
            else:
                local.lost = True

    async def record_feedback(
        self, request_id: str, events: list[dict[str, Any]]
    ) -> tuple[int, int]:
        """Queue the new events of one feedback call; (accepted, duplicates). Raises
        UnknownRequest (404), FeedbackError (422: an id the request did not serve) or
        FeedbackUnavailable (503: logging off or failing to write, or Redis unreachable for an
        id not known here)."""
        if self.sink is None:
            raise FeedbackUnavailable(LOGGING_OFF)
        if not await self.sink.usable():
            # The reason (a path, a Redis error) goes to the service log, not to clients; once
            # a minute, not per call (the sink logs the outage itself).
            held = self._refusals.admit("sink")
            if held is not None:
                log.warning(
                    "feedback refused: the impression log fails (%s)%s",
                    self.sink.failing,
                    held_note(held, self._refusals.interval_s),
                )
            raise FeedbackUnavailable(SINK_FAILING)
        served = await self._served(request_id)
        # Each unknown id once (a click and a dwell on it named it twice); 1 and "1" differ.
        unknown = list(
            {(type(i), i): i for i in (e["id"] for e in events) if i not in served.ids}.values()
        )
        if unknown:
            shown = ", ".join(clipped(orjson.dumps(i).decode(), 256) for i in unknown[:5])
            noun = "candidate" if len(unknown) == 1 else "candidates"
            raise FeedbackError(f"request {request_id!r} did not serve {noun} {shown}")
        fresh: list[dict[str, Any]] = []
        for event in events:
            key = (event["id"], event["type"])
            if key not in served.seen:
                served.seen.add(key)
                fresh.append(event)
        try:
            fresh = await self._shared_dedup(request_id, fresh)
        except FeedbackUnavailable:
            # Not acknowledged, so not seen either: the client's retry must count.
            served.seen.difference_update((e["id"], e["type"]) for e in fresh)
            raise
        if fresh:
            self.sink.submit(feedback_record(request_id, fresh))
        return len(fresh), len(events) - len(fresh)

    async def _served(self, request_id: str) -> Served:
        """The impression feedback on `request_id` refers to: with Redis, the shared record
        (a request id reused on two replicas has one first impression; each replica's own
        entry only until that record is written); else what this process served."""
        _, local = self.index.get(request_id)
        assert local is None or isinstance(local, Served)
        if local is not None and not local.alive:  # its ids overwritten by newer requests'
            local = None
        if local is not None and local.lost:
            raise UnknownRequest(
                f"request id {request_id!r}: its impression could not be written (the impression "
                "log failed), so feedback on it cannot be recorded"
            )
        if local is not None and (self.redis is None or local.shared):
            return local
        if self.redis is None:
            # Each worker keeps its own requests without Redis: say so, or a 404 for a request
            # another worker or replica served reads as a lost impression.
            raise UnknownRequest(
                f"unknown request id {request_id!r} (without Redis, a worker knows only the "
                "requests it served itself since it started: with several workers or replicas, or "
                "for feedback across restarts, log to Redis)"
            )
        # Read before the lookup: the sink may finish writing the record while the GET is on
        # its way, after Redis answered it. Judged by the flag as it was then, such a record
        # read as "written to Redis and no longer there" (a trial: 12 of 3,000 clicks sent
        # right after their answer, refused with a 404, each accepted 0.6 s later).
        written_before = local is not None and local.written
        try:
            raw = await self._shared_record(request_id, wait=local is None)
        except (RedisError, OSError, TimeoutError) as exc:
            if local is not None:
                return local  # what this replica served stands while Redis is away
            raise _store_unavailable(exc) from None
        if raw is None:
            if local is not None and not written_before:
                return local  # not written yet: this replica's is the first so far
            lost = local is not None
            self.index.discard(request_id)
            raise UnknownRequest(
                f"unknown request id {request_id!r}"
                + (" (its impression was written to Redis and is no longer there)" if lost else "")
            )
        _served_ids(raw, request_id)  # refused here if it is no impression of ours
        data = raw if isinstance(raw, bytes) else raw.encode()
        span = self.ring.add(data)
        if span is None:  # larger than the ring: checked against in a ring of its own, not kept
            own = ServedRing(len(data))
            own.add(data)
            return Served(own, (0, len(data)), shared=True)
        served = Served(self.ring, span, shared=True)
        if local is not None:
            served.seen = local.seen
        self.index.put(request_id, served)
        return served

    async def _shared_record(self, request_id: str, *, wait: bool) -> bytes | str | None:
        """Redis's record of what `request_id` served; with `wait`, one not there yet is
        looked for again until RECORD_GRACE_S have passed (see there)."""
        assert self.redis is not None
        key = f"{self.prefix}imp:{request_id}"
        loop = asyncio.get_running_loop()
        given_up = loop.time() + (RECORD_GRACE_S if wait else 0.0)
        pause = RECORD_FIRST_POLL_S
        while True:
            async with asyncio.timeout(LOOKUP_TIMEOUT_S):
                raw = await self.redis.get(key)
            left = given_up - loop.time()
            if raw is not None or left <= 0:
                return raw
            await asyncio.sleep(min(pause, left))
            pause *= 2

    async def _shared_dedup(
        self, request_id: str, events: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """Events no replica has recorded yet. FeedbackUnavailable when Redis does not answer:
        the record would go to the same Redis, and a soak trial saw such feedback answered 202
        (after 2 s) and then dropped with its batch, while Redis was paused."""
        if self.redis is None or not events:
            return events
        key = f"{self.prefix}fbseen:{request_id}"
        try:
            async with asyncio.timeout(LOOKUP_TIMEOUT_S):
                pipe = self.redis.pipeline(transaction=False)
                for event in events:
                    pipe.hsetnx(key, _seen_field(event["id"], event["type"]), 1)
                pipe.expire(key, self.ttl)
                created = await pipe.execute()
        except (RedisError, OSError, TimeoutError) as exc:
            raise _store_unavailable(exc) from None
        return [event for event, new in zip(events, created[:-1], strict=True) if new]


def _store_unavailable(exc: BaseException) -> FeedbackUnavailable:
    why = str(exc) or type(exc).__name__  # a timeout's message is empty: name the exception
    return FeedbackUnavailable(f"impression store unavailable: {why}")


def log_impression(
    impressions: ImpressionLog | None,
    body: dict[str, Any],
    query_id: str | int | None,
    user_id: str | None,
    user_cluster: str | None,
    ids: list[Any],
    features: np.ndarray,
) -> None:
    """The /rerank hook: queue the impression when logging is on (`ImpressionLog.log_rerank`).
    Never raises and never waits."""
    if impressions is not None and impressions.enabled:
        impressions.log_rerank(body, query_id, user_id, user_cluster, ids, features)


def _served_ids(raw: Any, request_id: str) -> set[Any]:
    """The ids of an impression record read from Redis (a JSON list of strings and integers,
    as ImpressionSink writes it); anything else there, written by another program, is no
    impression of ours."""
    try:
        ids = orjson.loads(raw) if isinstance(raw, bytes | str) else None
    except orjson.JSONDecodeError:
        ids = None
    if not isinstance(ids, list) or not all(type(i) is str or type(i) is int for i in ids):
        raise UnknownRequest(f"request id {request_id!r}: its impression record is unreadable")
    return set(ids)
