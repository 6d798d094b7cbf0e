"""Item features in Redis: one pipelined round trip per request, under the user features'
deadline and circuit breaker (`RedisStore.run`), and a breaker of the batches' own
(app.features.kind_breaker).

Keys (Redis contract): `{prefix}item:{set}:{set_version}:{item_id}` → the item's features as
packed float32 little-endian in the set's order; `{prefix}itemset:{set}` → the live
`set_version`, switched only after a complete, verified write (`ltr features push`);
`{prefix}itemset:{set}:{set_version}:meta` → JSON `{"names": [...], "count": n, ...}`.

A request sends `GETRANGE pointer` and `MGET` of its items' keys under the version it last
saw in one pipeline; only when the pointer has moved (once per push) does a second round trip
read the new version's meta and items. Versions are immutable, so their meta is cached for good.
The pointer and the meta are read with a size bound: a huge value written there by mistake
would otherwise be pulled by every request, time out, and open the breaker every lookup shares;
beyond the bound it is the set's own fault (no live set, malformed meta), not Redis's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import hiredis
import numpy as np
import orjson
from redis.exceptions import ConnectionError as RedisConnectionError

from app.artifacts.manifest import NAME_PATTERN
from app.features.item_row_cache import ItemRowCache
from app.features.kind_breaker import KindBreaker
from app.features.redis_store import Deadline, RedisStore

ITEM_SET_MISSING = "item_set_missing_in_redis"
ITEM_SET_MALFORMED = "item_set_meta_malformed"
META_CACHE_MAX = 64
# A version id is at most 64 characters (NAME_PATTERN); a few more leave room for stray
# whitespace, and anything this long is not one.
POINTER_READ = 128
META_READ = 1 << 20  # feature names: ~100 KB for thousands of them
_VERSION = re.compile(NAME_PATTERN)


def item_prefix(prefix: str, set_name: str, version: str) -> str:
    return f"{prefix}item:{set_name}:{version}:"


def pointer_key(prefix: str, set_name: str) -> str:
    return f"{prefix}itemset:{set_name}"


def meta_key(prefix: str, set_name: str, version: str) -> str:
    return f"{prefix}itemset:{set_name}:{version}:meta"


def item_keys(prefix: str, set_name: str, version: str, ids: Sequence[Any]) -> list[str]:
    head = item_prefix(prefix, set_name, version)
    return [head + name for name in _names(ids)]


def _names(ids: Sequence[Any]) -> list[str]:
    """Each id as its key writes it (an integer id 7 is the item "7")."""
    return [i if type(i) is str else str(i) for i in ids]


@dataclass(frozen=True)
class SetVersion:
    """One immutable version of an item feature set as Redis holds it."""

    version: str
    names: tuple[str, ...]


@dataclass(frozen=True)
class RedisItems:
    """A batch fetch: raw values aligned with the ids (None = absent), or an error reason."""

    values: list[bytes | None] | None
    set_version: SetVersion | None
    error: str | None = None


class RedisItemBackend:
    """Reads item feature rows for one event loop (not thread-safe, like RedisStore); rows of
    the live version already read come from the worker's row cache (app.features.item_row_cache)
    and only the others are asked of Redis."""

    def __init__(self, store: RedisStore, rows: ItemRowCache | None = None) -> None:
        self.store = store
        self.rows = rows if rows is not None else ItemRowCache(0)
        settings = store.settings
        self.breaker = KindBreaker(
            "item_batches",
            settings.breaker_failure_threshold,
            settings.breaker_reset_seconds,
            store.breaker.now,
        )
        self._live: dict[str, SetVersion] = {}  # set -> the version the pointer named last
        self._meta: dict[tuple[str, str], SetVersion] = {}

    def live_version(self, set_name: str) -> str | None:
        """The version the set's pointer named when this worker last read it (no round trip)."""
        known = self._live.get(set_name)
        return None if known is None else known.version

    async def fetch(self, set_name: str, ids: Sequence[Any], deadline: Deadline) -> RedisItems:
        prefix = self.store.prefix
        pointer = pointer_key(prefix, set_name)
        known = self._live.get(set_name)
        live: str | None
        if known is not None:
            if self.rows.enabled:
                return await self._cached_fetch(set_name, known, ids, deadline)
            keys = item_keys(prefix, set_name, known.version, ids)
            reply, error = await self.store.run(
                deadline, _pipelined(_pointer_read(pointer), keys), kind=self.breaker
            )
            if error is not None:
                return RedisItems(None, None, error)
            live = _version(reply[0])
            if live == known.version:
                return await self._unless_vanished(set_name, known, ids, reply[1], deadline)
        else:
            reply, error = await self.store.run(
                deadline, lambda c: c.getrange(pointer, 0, POINTER_READ - 1)
            )
            if error is not None:
                return RedisItems(None, None, error)
            live = _version(reply)
        if live is None:
            self._live.pop(set_name, None)
            return RedisItems(None, None, ITEM_SET_MISSING)
        keys = item_keys(prefix, set_name, live, ids)
        cached = self._meta.get((set_name, live))
        if cached is not None:
            reply, error = await self.store.run(
                deadline, _pipelined(_pointer_read(pointer), keys), kind=self.breaker
            )
            if error is not None:
                return RedisItems(None, None, error)
            self._live[set_name] = cached
            self._kept(set_name, cached, ids, reply[1])
            return await self._unless_vanished(set_name, cached, ids, reply[1], deadline)
        meta = meta_key(prefix, set_name, live)
        read = ("GETRANGE", meta, "0", str(META_READ))  # one byte past the bound: over it
        reply, error = await self.store.run(deadline, _pipelined(read, keys), kind=self.breaker)
        if error is not None:
            return RedisItems(None, None, error)
        if not reply[0]:  # the pointer names a version whose meta is gone: none is live
            return RedisItems(None, None, ITEM_SET_MISSING)
        names = _meta_names(reply[0])
        if names is None:
            return RedisItems(None, None, ITEM_SET_MALFORMED)
        version = SetVersion(live, names)
        if len(self._meta) >= META_CACHE_MAX:
            self._meta.pop(next(iter(self._meta)))
        self._meta[(set_name, live)] = version
        self._live[set_name] = version
        self._kept(set_name, version, ids, reply[1])
        return RedisItems(reply[1], version)

    def _kept(
        self, set_name: str, version: SetVersion, ids: Sequence[Any], rows: list[Any]
    ) -> None:
        """Rows read from Redis for all of `ids`, into the row cache (well-formed ones)."""
        if not self.rows.enabled:
            return
        self.rows.keep(set_name, version.version, _names(ids), rows, 4 * len(version.names))
        self.rows.served(0, len(ids))

    async def _cached_fetch(
        self, set_name: str, known: SetVersion, ids: Sequence[Any], deadline: Deadline
    ) -> RedisItems:
        """fetch, asking Redis only for the rows the cache lacks (the pointer always)."""
        names = _names(ids)
        rows, misses = self.rows.lookup(set_name, known.version, names)
        head = item_prefix(self.store.prefix, set_name, known.version)
        wanted = [names[j] for j in misses]
        pointer = pointer_key(self.store.prefix, set_name)
        reply, error = await self.store.run(
            deadline,
            _pipelined(_pointer_read(pointer), [head + name for name in wanted]),
            kind=self.breaker,
        )
        if error is not None:
            return RedisItems(None, None, error)
        if _version(reply[0]) != known.version:  # a push switched it: read all under the new one
            self._live.pop(set_name, None)
            return await self.fetch(set_name, ids, deadline)
        fetched = reply[1]
        for j, row in zip(misses, fetched, strict=True):
            rows[j] = row
        self.rows.keep(set_name, known.version, wanted, fetched, 4 * len(known.names))
        self.rows.served(len(ids) - len(misses), len(misses))
        values = cast(list[bytes | None], rows)
        return await self._unless_vanished(set_name, known, ids, values, deadline)

    async def _unless_vanished(
        self,
        set_name: str,
        version: SetVersion,
        ids: Sequence[Any],
        values: list[bytes | None],
        deadline: Deadline,
    ) -> RedisItems:
        """`values` of `version`, unless none of the ids was found and its meta is gone: the
        version the pointer still names has vanished (expired, evicted, deleted), which is
        no live set (degraded, from the snapshot), not every item missing. Its meta is
        cached, so this asks Redis once more, and only when nothing was found: a race review
        saw such a version served with every item feature missing, `degraded: false`, for as
        long as the workers ran."""
        if not ids or any(values):
            return RedisItems(values, version)
        meta = meta_key(self.store.prefix, set_name, version.version)
        there, error = await self.store.run(deadline, lambda c: c.exists(meta), kind=self.breaker)
        if error is not None or there:
            return RedisItems(values, version)
        self._live.pop(set_name, None)
        self._meta.pop((set_name, version.version), None)
        return RedisItems(None, None, ITEM_SET_MISSING)


def decode_rows(values: Sequence[bytes | None], width: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(float32 [n, width] NaN where absent, bool found [n], malformed count) from packed rows.

    Every item present and well formed, the usual case, takes two C-speed passes (lengths,
    join): 0.08 ms for 1,000 rows of 100, against 0.24 ms for the general path."""
    n = len(values)
    size = 4 * width
    if n and width and None not in values:
        present = cast(Sequence[bytes], values)
        if set(map(len, present)) == {size}:
            rows = np.frombuffer(b"".join(present), dtype="<f4").reshape(n, width)
            return rows, np.ones(n, dtype=bool), 0
    out = np.full((n, width), np.nan, dtype=np.float32)
    found = np.fromiter((v is not None and len(v) == size for v in values), bool, n)
    malformed = sum(1 for v in values if v is not None) - int(found.sum())
    if found.any():
        packed = b"".join(v for v, ok in zip(values, found.tolist(), strict=True) if ok and v)
        out[found] = np.frombuffer(packed, dtype="<f4").reshape(-1, width)
    return out, found, malformed


def _pointer_read(pointer: str) -> tuple[str, ...]:
    return ("GETRANGE", pointer, "0", str(POINTER_READ - 1))


def _pipelined(first: tuple[str, ...], keys: list[str]) -> Any:
    """One round trip: `first` (a one-key command) and `MGET keys`, written as one buffer.

    redis-py's asyncio client packs commands in Python, about 1 us per argument: a
    thousand-key MGET cost more to encode than Redis takes to answer it. The buffer is packed
    by hiredis (C) and sent on a pooled connection, whose replies hiredis also parses; a
    connection left mid-reply (deadline, error) is dropped, never returned to the pool.

    Sent this way, it bypasses the client's Retry, which only wraps the client's own
    commands: a pooled connection that a restarted Redis closed failed the first request after
    every restart (redis_unavailable, degraded). So a connection error is retried once, at once,
    on a fresh socket (both reads are idempotent), still under the caller's deadline; a timeout
    is not (that would spend the deadline twice).
    """
    packed = _pack(first) + (_pack(("MGET", *keys)) if keys else b"")

    async def call(client: Any) -> list[Any]:
        pool = client.connection_pool
        conn = await pool.get_connection()
        try:
            try:
                return await _exchange(conn, packed, bool(keys))
            except RedisConnectionError:
                await conn.disconnect(nowait=True)  # the next send connects afresh
                return await _exchange(conn, packed, bool(keys))
        except BaseException:
            await conn.disconnect(nowait=True)
            raise
        finally:
            await pool.release(conn)

    return call


async def _exchange(conn: Any, packed: bytes, mget: bool) -> list[Any]:
    """`packed` sent on `conn` and its replies: [first command's, MGET's (or [])]."""
    await conn.send_packed_command(packed, check_health=False)
    head = await conn.read_response()
    values = await conn.read_response() if mget else []
    return [head, values]


def _pack(args: tuple[str, ...]) -> bytes:
    # hiredis's stub types the tuple as one element; it takes any number.
    return bytes(hiredis.pack_command(args))  # type: ignore[arg-type]


def _version(raw: Any) -> str | None:
    """The version a pointer names; None for none (empty: GETRANGE of a missing key) and for
    one no push writes (too long, garbage), which must not become keys to look up."""
    if not raw:
        return None
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    text = text.strip()
    return text if _VERSION.fullmatch(text) else None


def _meta_names(raw: Any) -> tuple[str, ...] | None:
    if not isinstance(raw, bytes) or len(raw) > META_READ:
        return None
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    names = doc.get("names") if isinstance(doc, dict) else None
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        return None
    return tuple(names)
