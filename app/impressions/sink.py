"""Impression and feedback records, buffered in memory and written in batches to a Redis Stream
or a JSONL file; a record that cannot be written is dropped and counted, never waited for.

Record format (one JSON object per JSONL line, or the `data` field of one stream entry):

- impression: `{"kind": "impression", "request_id", "ts" (Unix seconds), "query_id",
  "user_id", "user_cluster", "model", "version", "ids" (served candidate ids, best first),
  "positions" (1-based positions served, aligned with ids), "n_features",
  "features", for requests in an online experiment "experiment": `{"name", "mode",
  "control", "candidate"}` plus `"teams"` (interleave: 0 = control, 1 = candidate, aligned with
  ids) or `"arm"` (ab: "control" or "candidate")}`, and for an explored answer
  (app.api.exploration) `"explored"`, the position whose result was swapped with the first.
  `features` is the base64 of the float32 little-endian row-major matrix
  `[len(ids), n_features]` the model scored (rows aligned with `ids`, NaN = missing): 4 bytes
  a value plus a third, about 3x smaller than a JSON float list and exact.
- feedback: `{"kind": "feedback", "request_id", "ts", "events": [{"id", "type", "value"}]}`.

Redis keys: streams `{prefix}impressions` and `{prefix}feedback` (each capped by
`XADD MAXLEN ~ impressions_stream_maxlen`, approximate trimming), and `{prefix}imp:{request_id}`
(the served ids, expiring after `impressions_ttl_seconds`) so any replica can check a feedback
call. Without Redis, the `impressions_jsonl` file gets both kinds.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import errno
import fcntl
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import anyio.to_thread
import numpy as np
import orjson
import redis.asyncio as aioredis
from prometheus_client import Counter

from app.errors import counted
from app.redis_pool import waiting_client
from app.settings import Settings

log = logging.getLogger(__name__)

BATCH_MAX = 256  # records per write: one pipeline / one write() call
# Bytes per write as well: 256 impressions of 1,000 x 300 features are 300 MB, held (and
# encoded, twice that) while a stalled Redis takes WRITE_TIMEOUT_S to refuse them.
BATCH_MAX_BYTES = 16 * 2**20
WRITE_TIMEOUT_S = 2.0  # a batch that takes longer is dropped (the queue keeps filling meanwhile)
CLOSE_TIMEOUT_S = 2.0  # how long shutdown waits for the queue to drain
# While the sink cannot write, the log says so when it starts and when it ends, and in between
# at most this often how many records were dropped: a line per failed batch was a line per
# request (200 in 10 s) for as long as Redis was down. The metrics count every one.
OUTAGE_REMINDER_S = 60.0
# A failing JSONL log counts as mended (feedback accepted again) once this much is free to the
# service's user: 1 MiB holds thousands of feedback records (a few hundred bytes each) and the
# batches of ordinary traffic (an impression of 100 candidates x 100 features is ~55 KB), so a
# disk with room left is not refused, while a disk full to the last blocks (what ENOSPC leaves)
# is. A larger batch that still does not fit fails its write and marks the log failing again.
JSONL_MIN_FREE_BYTES = 2**20

WRITTEN = Counter("ltr_impressions_written_total", "Log records written, by kind.", ["kind"])
DROPPED = Counter(
    "ltr_impressions_dropped_total",
    "Log records dropped, by kind and reason (queue_full, sink_error, encode_error, shutdown).",
    ["kind", "reason"],
)


def encode_features(matrix: np.ndarray) -> str:
    """base64 of float32 little-endian row-major bytes of `matrix` [n_rows, n_features]."""
    return base64.b64encode(np.ascontiguousarray(matrix, dtype="<f4").tobytes()).decode("ascii")


def impression_record(
    request_id: str,
    query_id: str | int | None,
    user_id: str | None,
    user_cluster: str | None,
    model: str,
    version: str,
    ids: Sequence[Any],
    features: np.ndarray,
    ts: float | None = None,
    experiment: dict[str, Any] | None = None,
    explored: int | None = None,
) -> dict[str, Any]:
    """An impression with `ids` in served order; `features` [len(ids), n_features] float32 stays
    a numpy array here and is encoded by the background writer, off the request path."""
    record = {
        "kind": "impression",
        "request_id": request_id,
        "ts": time.time() if ts is None else ts,
        "query_id": query_id,
        "user_id": user_id,
        "user_cluster": user_cluster,
        "model": model,
        "version": version,
        "ids": list(ids),
        "positions": list(range(1, len(ids) + 1)),
        "n_features": int(features.shape[1]),
        "features": features,
    }
    if experiment is not None:
        record["experiment"] = experiment
    if explored is not None:
        record["explored"] = explored
    return record


def feedback_record(
    request_id: str, events: list[dict[str, Any]], ts: float | None = None
) -> dict[str, Any]:
    return {
        "kind": "feedback",
        "request_id": request_id,
        "ts": time.time() if ts is None else ts,
        "events": events,
    }


def to_json(record: dict[str, Any]) -> bytes:
    features = record.get("features")
    if isinstance(features, np.ndarray):
        record = {**record, "features": encode_features(features)}
    return orjson.dumps(record)


class Writer(Protocol):
    async def write(self, records: list[dict[str, Any]]) -> None: ...

    async def check(self) -> None:
        """Raise unless a write could succeed now (nothing is written)."""

    async def close(self) -> None: ...


class JsonlWriter:
    """Appends one line per record; each batch is a single O_APPEND write, so lines from
    several worker processes sharing the file do not interleave.

    A write that fails part-way (ENOSPC after some of the bytes reached the file) is undone:
    the file is cut back to the size it had before, so no torn record is left for the next one
    to be appended to on the same line (the log then held a corrupt line forever, and
    `ltr dataset --from-logs` refused the whole file). Should the cut fail too, the next append
    starts with a newline: only the torn line is bad, not the records after it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._torn = False  # a cut that failed, for a file this process cannot read back

    def _open(self) -> tuple[int, bool]:
        """A descriptor appending to the file, and whether it can read the file too."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_APPEND | os.O_CREAT
        try:
            return os.open(self.path, flags | os.O_RDWR, 0o644), True
        except PermissionError:  # writable but not readable: append without looking
            return os.open(self.path, flags | os.O_WRONLY, 0o644), False

    def _append(self, data: bytes) -> None:
        fd, readable = self._open()
        try:
            # The workers sharing the file append one at a time: a cut back to the size
            # before this append must not take another worker's record written meanwhile.
            # Released with the descriptor; a file system without locks goes on unlocked.
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_EX)
            start = os.fstat(fd).st_size
            torn = os.pread(fd, 1, start - 1) != b"\n" if readable and start else self._torn
            if torn:
                data = b"\n" + data
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            except OSError:
                try:
                    os.ftruncate(fd, start)
                except OSError:
                    self._torn = True
                raise
            self._torn = False
        finally:
            os.close(fd)

    async def write(self, records: list[dict[str, Any]]) -> None:
        data = b"".join(to_json(r) + b"\n" for r in records)
        await anyio.to_thread.run_sync(self._append, data)

    def _check(self) -> None:
        os.close(self._open()[0])  # a directory or no permission raises
        # Opening a file succeeds on a full disk: the free space is asked too, or the sink
        # marked failing by a write that hit ENOSPC passed this check at once, and feedback
        # was answered 202 while its record could only be dropped.
        try:
            fs = os.statvfs(self.path.parent)
        except OSError:
            return  # free space unknown: the open above is all that can be told
        free = fs.f_bavail * fs.f_frsize  # what an unprivileged writer may still use
        if fs.f_blocks and free < JSONL_MIN_FREE_BYTES:  # 0 blocks: a size not reported
            raise OSError(
                errno.ENOSPC,
                f"No space left on device: {free} bytes free for the impression log, under "
                f"the {JSONL_MIN_FREE_BYTES} it needs",
                str(self.path),
            )

    async def check(self) -> None:
        await anyio.to_thread.run_sync(self._check)

    async def close(self) -> None:
        return None


class RedisStreamWriter:
    """One pipeline per batch: XADD each record to its kind's stream (MAXLEN ~) and SET EX the
    served ids of each impression. `lookups`: the client /feedback reads impressions with
    (default `client`); apart, a flood of lookups cannot take the connections the writes need
    (their batches failed "Too many connections", and were dropped)."""

    def __init__(
        self,
        client: aioredis.Redis,
        prefix: str,
        maxlen: int,
        ttl_seconds: int,
        lookups: aioredis.Redis | None = None,
    ) -> None:
        self.client = client
        self.lookups = client if lookups is None else lookups
        self.prefix = prefix
        self.maxlen = maxlen
        self.ttl = ttl_seconds

    async def write(self, records: list[dict[str, Any]]) -> None:
        pipe = self.client.pipeline(transaction=False)
        for record in records:
            impression = record["kind"] == "impression"
            stream = f"{self.prefix}{'impressions' if impression else 'feedback'}"
            pipe.xadd(stream, {"data": to_json(record)}, maxlen=self.maxlen, approximate=True)
            if impression:
                ids = orjson.dumps(record["ids"])
                # nx: a reused request id keeps its first impression (ImpressionLog.log_rerank)
                pipe.set(f"{self.prefix}imp:{record['request_id']}", ids, ex=self.ttl, nx=True)
        await pipe.execute()

    async def check(self) -> None:
        await self.client.ping()

    async def close(self) -> None:
        await self.client.aclose()
        if self.lookups is not self.client:
            await self.lookups.aclose()


class ImpressionSink:
    """A bounded queue drained by one background task. `submit` never blocks and never raises:
    when the queue is full (`queue_size` records, or `max_bytes` of what they hold) the record
    is dropped and `ltr_impressions_dropped_total` rises.
    `failing` holds why the last write failed (None once one succeeds), so a feedback call is
    not acknowledged while its record would only be dropped."""

    def __init__(
        self,
        writer: Writer,
        queue_size: int,
        clock: Callable[[], float] = time.monotonic,
        max_bytes: int = 256 * 2**20,
    ) -> None:
        self.writer = writer
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(queue_size)
        self.max_bytes = max_bytes
        self.queued_bytes = 0
        self._sizes: collections.deque[int] = collections.deque()  # of the queued, in order
        self._task: asyncio.Task[None] | None = None
        self.failing: str | None = None
        self._outage = _OutageLog(clock)
        # Told of each batch's fate, written (True) or dropped by a failed write (False).
        self.on_batch: Callable[[list[dict[str, Any]], bool], None] | None = None

    async def usable(self) -> bool:
        """Whether a record submitted now can be written: true while writes succeed; after a
        failure, asks the writer again (so a mended sink is used without waiting for traffic)."""
        if self.failing is None:
            return True
        try:
            async with asyncio.timeout(WRITE_TIMEOUT_S):
                await self.writer.check()
        except Exception as exc:
            self.failing = _why(exc)
            return False
        self.failing = None
        return True

    def submit(self, record: dict[str, Any], size: int = 0) -> bool:
        """Queue `record`, which holds about `size` bytes (its feature rows, its ids)."""
        try:
            if self.queued_bytes and self.queued_bytes + size > self.max_bytes:
                raise asyncio.QueueFull
            self.queue.put_nowait(record)
        except asyncio.QueueFull:
            DROPPED.labels(record.get("kind", "unknown"), "queue_full").inc()
            return False
        self._sizes.append(size)
        self.queued_bytes += size
        return True

    async def _next_batch(self) -> tuple[list[dict[str, Any]], int]:
        """Records off the queue for one write, and the bytes they hold: those stay counted
        in `queued_bytes` until `_done` (a batch being written holds its records too)."""
        batch = [await self.queue.get()]
        held = self._sizes.popleft()
        while len(batch) < BATCH_MAX and held < BATCH_MAX_BYTES and not self.queue.empty():
            batch.append(self.queue.get_nowait())
            held += self._sizes.popleft()
        return batch, held

    def _done(self, batch: list[dict[str, Any]], held: int) -> None:
        self.queued_bytes -= held
        for _ in batch:
            self.queue.task_done()

    async def start(self) -> None:
        if self._task is None:
            self.failing = "not checked yet"  # a feedback call before the check makes its own
            self._task = asyncio.create_task(self._drain(), name="impression-sink")

    async def _drain(self) -> None:
        # Checked here, not in start: a Redis that does not answer must not delay start-up.
        if not await self.usable():
            self._outage.failed(self.failing or "", 0, error=True)
        while True:
            batch, held = await self._next_batch()
            try:
                await self._write(batch)
            finally:
                self._done(batch, held)

    async def _write(self, batch: list[dict[str, Any]]) -> None:
        try:
            async with asyncio.timeout(WRITE_TIMEOUT_S):
                await self.writer.write(batch)
        except Exception as exc:  # whatever the sink does, serving goes on
            self.failing = _why(exc)
            self._outage.failed(self.failing, len(batch))
            for record in batch:
                DROPPED.labels(record.get("kind", "unknown"), "sink_error").inc()
            self._tell(batch, False)
            return
        self.failing = None
        self._outage.wrote()
        for record in batch:
            WRITTEN.labels(record["kind"]).inc()
        self._tell(batch, True)

    def _tell(self, batch: list[dict[str, Any]], written: bool) -> None:
        if self.on_batch is not None:
            try:
                self.on_batch(batch, written)
            except Exception:  # the drain must go on
                log.exception("the impression sink's batch callback failed")

    async def flush(self) -> None:
        """Write whatever is queued now (tests and shutdown)."""
        while not self.queue.empty():
            batch, held = await self._next_batch()
            try:
                await self._write(batch)
            finally:
                self._done(batch, held)

    async def close(self) -> None:
        """Give the queue up to CLOSE_TIMEOUT_S to drain (the batch in flight included), then
        stop; what is still queued after that is dropped (reason `shutdown`)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                if self._task is None:
                    await self.flush()
                else:
                    await self.queue.join()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        while not self.queue.empty():
            record = self.queue.get_nowait()
            self.queued_bytes -= self._sizes.popleft()
            DROPPED.labels(record.get("kind", "unknown"), "shutdown").inc()
        await self.writer.close()


class _OutageLog:
    """The sink's failures as log lines: one when writes start failing, a reminder with the
    records dropped at most once per OUTAGE_REMINDER_S, one when a write succeeds again."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._since: float | None = None  # when the outage being reported started
        self._logged = 0.0  # when it was last logged
        self._dropped = 0  # records dropped since then
        self._total = 0  # records dropped during the whole outage

    def failed(self, why: str, dropped: int, error: bool = False) -> None:
        now = self._clock()
        self._dropped += dropped
        self._total += dropped
        if self._since is None:
            self._since = self._logged = now
            self._dropped = 0
            log.log(
                logging.ERROR if error else logging.WARNING,
                "the impression log cannot be written (%s): records are dropped "
                "(ltr_impressions_dropped_total) until it can; logged again when it can, and "
                "at most every %g s meanwhile",
                why,
                OUTAGE_REMINDER_S,
            )
        elif now - self._logged >= OUTAGE_REMINDER_S:
            log.warning(
                "the impression log still cannot be written (%s): %s dropped in the last %.0f s",
                why,
                counted(self._dropped, "record"),
                now - self._logged,
            )
            self._logged, self._dropped = now, 0

    def wrote(self) -> None:
        if self._since is None:
            return
        log.warning(
            "the impression log is written again after %.0f s (%s dropped meanwhile)",
            self._clock() - self._since,
            counted(self._total, "record"),
        )
        self._since, self._dropped, self._total = None, 0, 0


def _why(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__  # a timeout's message is empty


def make_writer(settings: Settings) -> Writer | None:
    """Redis when `redis_url` is set, else the JSONL file, else None (logging off)."""
    if settings.redis_url and settings.impressions_jsonl is not None:
        # Both set is likely a leftover or a misunderstanding: say which one is written.
        log.warning(
            "LTR_REDIS_URL and LTR_IMPRESSIONS_JSONL are both set: Redis wins, impressions and "
            "feedback go to its streams %simpressions and %sfeedback; LTR_IMPRESSIONS_JSONL (%s) "
            "is not written",
            settings.redis_prefix,
            settings.redis_prefix,
            settings.impressions_jsonl,
        )
    if settings.redis_url:
        timeouts: dict[str, Any] = {
            "socket_connect_timeout": WRITE_TIMEOUT_S,
            "socket_timeout": WRITE_TIMEOUT_S,
        }
        # One batch is written at a time: the writes need a connection or two.
        client = aioredis.Redis.from_url(settings.redis_url, **timeouts)
        lookups = waiting_client(
            settings.redis_url, settings.redis_max_connections, WRITE_TIMEOUT_S, **timeouts
        )
        return RedisStreamWriter(
            client,
            settings.redis_prefix,
            settings.impressions_stream_maxlen,
            settings.impressions_ttl_seconds,
            lookups,
        )
    if settings.impressions_jsonl is not None:
        return JsonlWriter(settings.impressions_jsonl)
    return None
