"""Item feature sets in Redis: push a whole new version, verify it, then switch the pointer.

Keys as `app.features.item_redis` reads them. A push writes every item of the new version
(MSET batches, pipelined), reads every value back and compares it byte for byte, writes the
version's meta, and only then points `{prefix}itemset:{set}` at it with one atomic `SET ... GET`.
A push that fails or is killed before that last step leaves the pointer (what is served)
untouched; its partial keys are expired by the next push. After the switch, versions other
than the live one and the one it replaced (kept for a rollback) get a TTL and vanish.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import redis

from app.errors import LtrError
from app.features.item_redis import item_prefix, meta_key, pointer_key
from trainer.features.item_table import ItemTable

BATCH = 5_000  # items per MSET / MGET
BATCHES_PER_ROUND_TRIP = 8
EXPIRE_SECONDS = 24 * 3600
SCAN_COUNT = 10_000


class PushError(LtrError, RuntimeError):
    """The new version could not be written or did not read back as written."""


def versions_key(prefix: str, set_name: str) -> str:
    """Sorted set of the set's versions (score: push time), for expiry and inspection."""
    return f"{prefix}itemset:{set_name}:versions"


@dataclass(frozen=True)
class PushResult:
    set: str
    version: str
    previous: str | None
    items: int
    seconds: float
    unchanged: bool
    expired: list[str]


def push_item_set(
    client: redis.Redis,
    prefix: str,
    set_name: str,
    table: ItemTable,
    *,
    version: str | None = None,
    expire_seconds: int = EXPIRE_SECONDS,
    progress: Callable[[int, int], None] | None = None,
) -> PushResult:
    """Write `table` as version `version` (default: its content id) and make it live."""
    started = time.perf_counter()
    version = version or table.version()
    pointer = pointer_key(prefix, set_name)
    live = _text(client.get(pointer))
    if live == version and _meta(client, prefix, set_name, version) is not None:
        return PushResult(set_name, version, live, len(table.ids), 0.0, True, [])
    client.zadd(versions_key(prefix, set_name), {version: time.time()})
    rows = np.ascontiguousarray(table.matrix, dtype="<f4")
    width = 4 * rows.shape[1]
    buffer = rows.tobytes()
    head = item_prefix(prefix, set_name, version)
    keys = [head + str(i) for i in table.ids.tolist()]
    n = len(keys)
    for done, batch in _rounds(n):
        pipe = client.pipeline(transaction=False)
        for lo, hi in batch:
            pipe.mset({keys[i]: buffer[i * width : (i + 1) * width] for i in range(lo, hi)})
        pipe.execute()
        if progress is not None:
            progress(done, 2 * n)
    for done, batch in _rounds(n):
        pipe = client.pipeline(transaction=False)
        for lo, hi in batch:
            pipe.mget(keys[lo:hi])
        for (lo, hi), values in zip(batch, pipe.execute(), strict=True):
            if None in values or b"".join(values) != buffer[lo * width : hi * width]:
                _read_back_error(keys, values, buffer, lo, width, live)
        if progress is not None:
            progress(n + done, 2 * n)
    meta = {
        "names": table.names,
        "count": n,
        "created_at": time.time(),
        "source": table.source,
    }
    client.set(meta_key(prefix, set_name, version), orjson.dumps(meta))
    previous = _text(client.set(pointer, version, get=True))
    expired = expire_old_versions(client, prefix, set_name, {version, previous}, expire_seconds)
    seconds = time.perf_counter() - started
    return PushResult(set_name, version, previous, n, seconds, False, expired)


def switch_version(client: redis.Redis, prefix: str, set_name: str, version: str) -> str | None:
    """Point the set at an existing, complete `version` (a rollback); returns the previous one."""
    meta = _meta(client, prefix, set_name, version)
    if meta is None:
        raise PushError(f"item set {set_name!r} has no complete version {version!r} in Redis")
    key = f"{item_prefix(prefix, set_name, version)}*"
    if client.ttl(meta_key(prefix, set_name, version)) > 0:
        # Revived: its keys must not vanish while it serves.
        for batch in _scan_batches(client, key):
            pipe = client.pipeline(transaction=False)
            for k in batch:
                pipe.persist(k)
            pipe.execute()
        client.persist(meta_key(prefix, set_name, version))
        client.zadd(versions_key(prefix, set_name), {version: time.time()})
    return _text(client.set(pointer_key(prefix, set_name), version, get=True))


def expire_old_versions(
    client: redis.Redis, prefix: str, set_name: str, keep: set[str | None], seconds: int
) -> list[str]:
    """Give every version not in `keep` (and its meta) a TTL of `seconds`; their names."""
    vkey = versions_key(prefix, set_name)
    old = [v for v in (_text(x) for x in client.zrange(vkey, 0, -1)) if v and v not in keep]
    for version in old:
        for batch in _scan_batches(client, f"{item_prefix(prefix, set_name, version)}*"):
            pipe = client.pipeline(transaction=False)
            for k in batch:
                pipe.expire(k, seconds, nx=True)
            pipe.execute()
        client.expire(meta_key(prefix, set_name, version), seconds, nx=True)
        client.zrem(vkey, version)
    return old


def live_version(client: redis.Redis, prefix: str, set_name: str) -> str | None:
    return _text(client.get(pointer_key(prefix, set_name)))


def read_meta(
    client: redis.Redis, prefix: str, set_name: str, version: str
) -> dict[str, Any] | None:
    return _meta(client, prefix, set_name, version)


def read_item_set(client: redis.Redis, prefix: str, set_name: str, version: str) -> ItemTable:
    """A whole version back from Redis (for `ltr features diff`)."""
    meta = _meta(client, prefix, set_name, version)
    if meta is None:
        raise PushError(f"item set {set_name!r} has no complete version {version!r} in Redis")
    names = list(meta["names"])
    head = item_prefix(prefix, set_name, version)
    ids: list[str] = []
    rows: list[bytes] = []
    for batch in _scan_batches(client, f"{head}*"):
        values = client.mget(batch)
        for k, v in zip(batch, values, strict=True):
            if isinstance(v, bytes) and len(v) == 4 * len(names):
                ids.append(_text(k)[len(head) :])  # type: ignore[index]
                rows.append(v)
    matrix = np.frombuffer(b"".join(rows), dtype="<f4").reshape(len(ids), len(names))
    source = f"redis:{set_name}@{version}"
    return ItemTable(np.asarray(ids, dtype=np.str_), matrix.astype(np.float32), names, source)


def sample_items(
    client: redis.Redis, prefix: str, set_name: str, version: str, count: int
) -> list[tuple[str, bytes]]:
    head = item_prefix(prefix, set_name, version)
    keys: list[Any] = []
    for batch in _scan_batches(client, f"{head}*", scan_count=max(count, 100)):
        keys.extend(batch)
        if len(keys) >= count:
            break
    keys = sorted(keys)[:count]
    values = client.mget(keys) if keys else []
    return [
        (str(_text(k))[len(head) :], v)
        for k, v in zip(keys, values, strict=True)
        if isinstance(v, bytes)
    ]


def _read_back_error(
    keys: list[str], values: list[Any], buffer: bytes, lo: int, width: int, live: str | None
) -> None:
    for i, value in enumerate(values):
        if value != buffer[(lo + i) * width : (lo + i + 1) * width]:
            raise PushError(
                f"item {keys[lo + i]!r} did not read back as written; the live version "
                f"({live}) is unchanged"
            )


def _rounds(n: int) -> Iterator[tuple[int, list[tuple[int, int]]]]:
    """(items done after this round, [(lo, hi) batches]) covering 0..n."""
    step = BATCH * BATCHES_PER_ROUND_TRIP
    for start in range(0, n, step):
        stop = min(start + step, n)
        yield stop, [(lo, min(lo + BATCH, stop)) for lo in range(start, stop, BATCH)]


def _scan_batches(
    client: redis.Redis, match: str, scan_count: int = SCAN_COUNT
) -> Iterator[list[Any]]:
    cursor: int = 0
    while True:
        cursor, keys = client.scan(cursor=cursor, match=match, count=scan_count)
        if keys:
            yield list(keys)
        if cursor == 0:
            return


def _meta(client: redis.Redis, prefix: str, set_name: str, version: str) -> dict[str, Any] | None:
    raw = client.get(meta_key(prefix, set_name, version))
    if raw is None:
        return None
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("names"), list) else None


def _text(raw: Any) -> str | None:
    if raw is None:
        return None
    return (raw.decode() if isinstance(raw, bytes) else str(raw)).strip() or None
