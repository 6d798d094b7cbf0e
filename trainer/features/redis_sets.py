"""Item feature sets in Redis: push a whole new version, verify it, then switch the pointer.

Keys as `app.features.item_redis` reads them. A push writes every item of the new version
(MSET batches, pipelined), reads every value back and compares it byte for byte, writes the
version's meta, and only then points `{prefix}itemset:{set}` at it with one atomic `SET ... GET`.
A push that fails or is killed before that last step leaves the pointer (what is served)
untouched; a failed push deletes its partial keys (best effort), a killed one's (or one whose
Redis stopped answering) are expired by a push once its marker of a write in progress
has expired (two minutes: trainer.features.set_retention). Pushing the live version again verifies
it and rewrites what is missing or wrong. After a switch (a push or a rollback), versions other
than the live one and the one it replaced (kept for a rollback) get a TTL and vanish; they stay
listed, with their expiry, until they are gone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import redis

from app.features.item_redis import item_prefix, meta_key, pointer_key
from trainer.features.item_table import ItemTable
from trainer.features.set_keys import (
    check_name,
    item_counts,
    scan_batches,
    text_of,
    version_pattern,
)
from trainer.features.set_retention import (
    expire_old_versions,
    old_version_ttl,
    switch_lock,
    writing,
)
from trainer.features.set_retention import versions_key as versions_key  # callers import it
from trainer.features.set_writes import BATCH, PackedItems, mismatches, refused, repair, write_items
from trainer.features.set_writes import PushError as PushError  # callers import it from here

_text = text_of


class RedisStopped(PushError, redis.ConnectionError):
    """Redis stopped answering, or the connection broke, during a push: a PushError saying what
    is served, and a ConnectionError for callers that tell an unreachable Redis apart."""


@dataclass(frozen=True)
class PushResult:
    set: str
    version: str
    previous: str | None
    items: int
    seconds: float
    unchanged: bool
    expired: list[str]
    repaired: int = 0  # items of an already live version rewritten because Redis lost them


def push_item_set(
    client: redis.Redis,
    prefix: str,
    set_name: str,
    table: ItemTable,
    *,
    version: str | None = None,
    old_ttl: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> PushResult:
    """Write `table` as version `version` (default: its content id) and make it live; versions
    neither live nor kept for a rollback get a TTL of `old_ttl` seconds (default
    LTR_ITEM_SET_OLD_TTL_SECONDS or a day; 0 removes them)."""
    started = time.perf_counter()
    old_ttl = old_version_ttl(old_ttl)
    check_name("item set", set_name)
    version = check_name("version", version or table.version())
    pointer = pointer_key(prefix, set_name)
    live = _text(client.get(pointer))
    live_meta = _meta(client, prefix, set_name, live) if live is not None else None
    served = Served(client, prefix, set_name, live, live_meta)
    known = (live_meta if live == version else _meta(client, prefix, set_name, version)) is not None
    rows = np.ascontiguousarray(table.matrix, dtype="<f4")
    packed = PackedItems(
        [item_prefix(prefix, set_name, version) + str(i) for i in table.ids.tolist()],
        rows.tobytes(),
        4 * rows.shape[1],
    )
    n = len(packed.keys)
    if live == version and known:
        repaired = _guarded(lambda: repair(client, packed), served)
        seconds = time.perf_counter() - started
        return PushResult(set_name, version, live, n, seconds, True, [], repaired)
    meta = {"names": table.names, "count": n, "created_at": time.time(), "source": table.source}

    # A version Redis already held (the one kept for rollback) is left as it was.
    discard = None if known else lambda: _discard(client, prefix, set_name, version, packed)
    with writing(client, prefix, set_name, version) as marker:

        def step(done: int, total: int) -> None:
            marker.refresh()
            if progress is not None:
                progress(done, total)

        def write() -> None:
            client.zadd(versions_key(prefix, set_name), {version: time.time()})
            write_items(client, packed, range(n), step, 2 * n)
            bad = mismatches(client, packed, range(n), step, 2 * n)
            if bad:
                key = packed.keys[bad[0]]
                gone = " (it is absent: evicted or deleted)" if not client.exists(key) else ""
                raise PushError(f"item {key!r} did not read back as written{gone}")
            client.set(meta_key(prefix, set_name, version), orjson.dumps(meta))

        _guarded(write, served, discard)
        with switch_lock(client, prefix, set_name):
            try:
                previous = _text(client.set(pointer, version, get=True))
            except redis.ResponseError as exc:  # refused, so not run: nothing switched
                raise _failed(exc, served, discard is not None and discard()) from None
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                raise RedisStopped(
                    f"Redis did not answer the switch to {version} ({exc}): whether the "
                    f"pointer moved is unknown (it named {served.live or 'no version'} "
                    f"before); `ltr features inspect redis:{set_name}` says, and pushing "
                    "again completes it"
                ) from None
            expired = expire_old_versions(client, prefix, set_name, {version, previous}, old_ttl)
    seconds = time.perf_counter() - started
    return PushResult(set_name, version, previous, n, seconds, False, expired)


def switch_version(
    client: redis.Redis, prefix: str, set_name: str, version: str, old_ttl: int | None = None
) -> str | None:
    """Point the set at an existing, complete `version` (a rollback); returns the previous one.
    `old_ttl` as for push_item_set."""
    old_ttl = old_version_ttl(old_ttl)
    check_name("item set", set_name)
    check_name("version", version)
    with switch_lock(client, prefix, set_name):
        return _switch(client, prefix, set_name, version, old_ttl)


def _switch(
    client: redis.Redis, prefix: str, set_name: str, version: str, old_ttl: int
) -> str | None:
    live = _text(client.get(pointer_key(prefix, set_name)))
    meta = _meta(client, prefix, set_name, version)
    if meta is None:
        raise PushError(f"item set {set_name!r} has no complete version {version!r} in Redis")
    found = item_counts(client, prefix, set_name, {version: 4 * len(meta["names"])})[version]
    if found != meta.get("count"):
        raise PushError(
            f"item set {set_name!r} version {version!r} is incomplete in Redis: {found:,} of "
            f"{meta.get('count')} items present with {len(meta['names'])} features; push its "
            "table again instead"
        )
    if client.ttl(meta_key(prefix, set_name, version)) > 0:
        # Revived: its keys must not vanish while it serves.
        for batch in scan_batches(client, version_pattern(prefix, set_name, version)):
            pipe = client.pipeline(transaction=False)
            for k in batch:
                pipe.persist(k)
            pipe.execute()
        client.persist(meta_key(prefix, set_name, version))
        client.zadd(versions_key(prefix, set_name), {version: time.time()})
    if live == version:
        # Live already (checked complete above): nothing to switch, and expiring as after a
        # switch would take the version kept for a rollback ("live" and "previous" name this).
        return version
    previous = _text(client.set(pointer_key(prefix, set_name), version, get=True))
    # As after a push: a version neither live nor kept for a rollback expires (one pushed
    # between them never did, rolled back over).
    expire_old_versions(client, prefix, set_name, {version, previous}, old_ttl)
    return previous


def live_version(client: redis.Redis, prefix: str, set_name: str) -> str | None:
    return _text(client.get(pointer_key(prefix, set_name)))


def read_meta(
    client: redis.Redis, prefix: str, set_name: str, version: str
) -> dict[str, Any] | None:
    return _meta(client, prefix, set_name, version)


def read_item_set(client: redis.Redis, prefix: str, set_name: str, version: str) -> ItemTable:
    """A whole version back from Redis (for `ltr features diff`)."""
    check_name("item set", set_name)
    check_name("version", version)
    meta = _meta(client, prefix, set_name, version)
    if meta is None:
        raise PushError(f"item set {set_name!r} has no complete version {version!r} in Redis")
    names = list(meta["names"])
    head = item_prefix(prefix, set_name, version)
    ids: list[str] = []
    rows: list[bytes] = []
    for batch in scan_batches(client, version_pattern(prefix, set_name, version)):
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
    pattern = version_pattern(prefix, set_name, version)
    for batch in scan_batches(client, pattern, scan_count=max(count, 100)):
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


@dataclass(frozen=True)
class Served:
    """The set's live version when a push began, and where to read it again."""

    client: redis.Redis
    prefix: str
    set_name: str
    live: str | None
    # The live version's meta when the push began: its row count and width, to say how many
    # rows survived if Redis evicts the meta meanwhile (the meta itself is then gone).
    live_meta: dict[str, Any] | None = None

    @property
    def pointer(self) -> str:
        return pointer_key(self.prefix, self.set_name)

    def now(self) -> str:
        """What a failed push's message says is served, read again after the failure: under
        `maxmemory` with an allkeys-* policy Redis may have evicted the pointer, or the meta
        of the version it names, while the push ran, and "the live version is unchanged" was
        then untrue (the service reads a pointer whose meta is gone as no live set)."""
        try:
            now = _text(self.client.get(self.pointer))
            meta_gone = now is not None and not self.client.exists(
                meta_key(self.prefix, self.set_name, now)
            )
        except redis.RedisError as exc:
            return f"the live version could not be read again ({exc}); {self._was()}"
        if now is None and self.live is None:
            return "no version is live (none was before)"
        if now is None:
            policy = eviction_policy(self.client)
            why = f"; Redis's maxmemory-policy is {policy}" if policy else ""
            return (
                f"the set now has NO live version in Redis (it was {self.live}): its pointer "
                f"{self.pointer!r} is gone (evicted, deleted, or Redis restarted empty{why}); "
                "services serve from their snapshots, degraded, until a push succeeds"
            )
        if meta_gone and now == self.live:
            return (
                f"the pointer still names {now} but Redis evicted its meta"
                f"{self._rows_evicted(now)}: the service sees no live set; push again with "
                "noeviction or a volatile-* policy"
            )
        if meta_gone:
            return (
                f"the pointer now names {now} ({self._was()}: another push or rollback?), "
                "a version whose meta is not in Redis: the service sees no live set"
            )
        if now == self.live:
            return f"the live version ({self.live}) is unchanged"
        return f"another version {now} is live now ({self._was()}: another push or rollback?)"

    def _was(self) -> str:
        # Never "it was None": a set's first push has nothing live before it.
        return "none was live before" if self.live is None else f"it was {self.live}"

    def _rows_evicted(self, version: str) -> str:
        """The " (and N of M rows)" of `version` that Redis evicted too; "" when that cannot be
        told. One SCAN of the set's keys, on a failed push only."""
        meta = self.live_meta if version == self.live else None
        names = meta.get("names") if meta is not None else None
        count = meta.get("count") if meta is not None else None
        if not isinstance(names, list) or not isinstance(count, int):
            return ""  # its size died with its meta (or it was never read)
        try:
            found = item_counts(self.client, self.prefix, self.set_name, {version: 4 * len(names)})
        except redis.RedisError:
            return ""
        return f" (and {count - found[version]:,} of {count:,} rows)"


def eviction_policy(client: redis.Redis) -> str | None:
    """Redis's `maxmemory-policy`; None when Redis refuses CONFIG (managed Redis often does)."""
    try:
        reply = client.config_get("maxmemory-policy")
    except redis.ResponseError:
        return None
    # A dict of str or of bytes, as the client decodes replies or not.
    values: dict[Any, Any] = dict(reply)
    return _text(values.get("maxmemory-policy") or values.get(b"maxmemory-policy"))


def eviction_warning(client: redis.Redis) -> str | None:
    """A warning when Redis may evict any key under memory pressure (an allkeys-* policy):
    an item set's keys and its live pointer carry no TTL, and only such a policy evicts them."""
    policy = eviction_policy(client)
    if policy is None or not policy.startswith("allkeys-"):
        return None
    return (
        f"warning: Redis's maxmemory-policy is {policy}: under maxmemory it evicts any key, "
        "item set rows and the live pointer included (the set is then served from the "
        "models' snapshots, degraded); item sets need noeviction or a volatile-* policy "
        "(docs/FEATURES.md)"
    )


def _guarded(
    step: Callable[[], Any], served: Served, discard: Callable[[], bool] | None = None
) -> Any:
    """Run `step`; on failure delete the partial version when `discard` is given (best effort:
    a killed push's keys are expired by a later push instead), and say what is served now."""
    try:
        return step()
    except (PushError, redis.ResponseError) as exc:
        raise _failed(exc, served, discard is not None and discard()) from None
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise _stopped(exc, served, discard) from None
    except Exception:
        if discard is not None:
            discard()
        raise


def _failed(exc: Exception, served: Served, deleted: bool) -> PushError:
    what = str(exc) if isinstance(exc, PushError) else refused(exc)
    note = "; its partial keys were deleted" if deleted else ""
    return PushError(f"{what}; {served.now()}{note}")


def _stopped(exc: Exception, served: Served, discard: Callable[[], bool] | None) -> RedisStopped:
    """What a push that lost Redis says: what is served, where its partial keys are. A Redis
    still not answering gets one PING (not a GET and the deletes, each waiting its timeout)."""
    try:
        served.client.ping()
    except redis.RedisError:
        was = served.live or "no version"
        kept = (
            "; the keys it wrote stay until a push of this set two minutes or more later "
            "expires them"
            if discard is not None
            else ""
        )
        return RedisStopped(
            f"Redis stopped answering during the push ({exc}); the push had not switched the "
            f"pointer, which named {was} when it began{kept}"
        )
    deleted = discard is not None and discard()
    note = "; its partial keys were deleted" if deleted else ""
    return RedisStopped(
        f"the connection to Redis broke during the push ({exc}); {served.now()}{note}"
    )


def _discard(
    client: redis.Redis, prefix: str, set_name: str, version: str, packed: PackedItems
) -> bool:
    """Delete a failed push's keys; False when Redis would not."""
    try:
        for start in range(0, len(packed.keys), BATCH):
            client.delete(*packed.keys[start : start + BATCH])
        client.delete(meta_key(prefix, set_name, version))
        client.zrem(versions_key(prefix, set_name), version)
    except redis.RedisError:
        return False
    return True


def _meta(client: redis.Redis, prefix: str, set_name: str, version: str) -> dict[str, Any] | None:
    raw = client.get(meta_key(prefix, set_name, version))
    if raw is None:
        return None
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("names"), list) else None
