"""How long an item set's versions pushed over stay in Redis, what a version takes there, and
how concurrent pushes keep off each other's versions.

After a switch (a push or a rollback) Redis keeps the live version and the one it replaced (a
rollback's target) without a TTL; every other version gets `LTR_ITEM_SET_OLD_TTL_SECONDS`
(default a day) and vanishes. A set pushed every hour thus holds up to a day of versions at
once, each as large as the live one (about 535 MB for 1M items x 100 features), which a Redis
sized for two versions refuses under `noeviction`: the setting is how an operator trades
rollback reach for memory, and 0 removes such versions at the switch.

Two pushes at once (a race review: 3 rounds in 36) could each expire the other's version: one
that finished gave the other's, still being written or just made live, a TTL, and the set's
live rows vanished a day (or `--old-ttl` seconds) later. So a version being written carries a
marker key (refreshed while it is written, gone within WRITING_TTL_S of a killed push) that
expiry leaves alone, and a switch with its expiry runs under the set's lock (redis-py's Lock),
so the version a switch replaced is the one it keeps.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

import redis

from app.errors import LtrError
from app.features.item_redis import meta_key
from trainer.features.set_keys import scan_batches, text_of, version_pattern

OLD_TTL_ENV = "LTR_ITEM_SET_OLD_TTL_SECONDS"
DEFAULT_OLD_TTL_SECONDS = 24 * 3600
MAX_OLD_TTL_SECONDS = 10 * 365 * 24 * 3600  # Redis refuses EXPIRE times past ~2^63 ms
_MEMORY_SAMPLE = 5  # item keys whose MEMORY USAGE estimates a version's
WRITING_TTL_S = 120  # a killed push's marker goes within this
_WRITING_REFRESH_S = 10.0
# Held around a switch and its expiry: minutes at most (expiring a few old versions of ~1M keys).
SWITCH_LOCK_TTL_S = 300
SWITCH_WAIT_S = 300


class RetentionError(LtrError, ValueError):
    """A TTL for old versions that is not a whole number of seconds >= 0, or a switch that
    could not get the set's lock."""


def old_version_ttl(seconds: int | None = None) -> int:
    """`seconds` if given, else LTR_ITEM_SET_OLD_TTL_SECONDS, else a day; RetentionError for a
    value that is not a whole number >= 0 (naming the variable it came from)."""
    if seconds is not None:
        if not 0 <= seconds <= MAX_OLD_TTL_SECONDS:
            raise RetentionError(
                f"the TTL of old item set versions must be 0 to {MAX_OLD_TTL_SECONDS} s, "
                f"not {seconds}"
            )
        return seconds
    text = os.environ.get(OLD_TTL_ENV, "").strip()
    if not text:
        return DEFAULT_OLD_TTL_SECONDS
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_OLD_TTL_SECONDS:
        raise RetentionError(
            f"{OLD_TTL_ENV}={text!r}: expected a whole number of seconds >= 0 "
            f"(at most {MAX_OLD_TTL_SECONDS})"
        )
    return value


def versions_key(prefix: str, set_name: str) -> str:
    """Sorted set of the set's versions (score: push time), for expiry and inspection."""
    return f"{prefix}itemset:{set_name}:versions"


def writing_key(prefix: str, set_name: str, version: str) -> str:
    return f"{prefix}itemset:{set_name}:{version}:writing"


class Writing:
    """The marker of a version being written: `refresh()` it as the write goes on."""

    def __init__(self, client: redis.Redis, key: str) -> None:
        self.client, self.key = client, key
        self._set_at = -float("inf")

    def refresh(self) -> None:
        now = time.monotonic()
        if now - self._set_at >= _WRITING_REFRESH_S:
            self.client.set(self.key, b"1", ex=WRITING_TTL_S)
            self._set_at = now


@contextmanager
def writing(client: redis.Redis, prefix: str, set_name: str, version: str) -> Iterator[Writing]:
    """Marks `version` as being written (expiry leaves it alone) until the block ends."""
    marker = Writing(client, writing_key(prefix, set_name, version))
    marker.refresh()
    try:
        yield marker
    finally:
        with contextlib.suppress(redis.RedisError):  # else it expires by itself
            client.delete(marker.key)


@contextmanager
def switch_lock(client: redis.Redis, prefix: str, set_name: str) -> Iterator[None]:
    """The set's lock around a switch and its expiry (one at a time per set)."""
    lock = client.lock(
        f"{prefix}itemset:{set_name}:switch",
        timeout=SWITCH_LOCK_TTL_S,
        blocking_timeout=SWITCH_WAIT_S,
    )
    if not lock.acquire():
        raise RetentionError(
            f"item set {set_name!r}: another push or rollback held its switch for "
            f"{SWITCH_WAIT_S} s; nothing was switched"
        )
    try:
        yield
    finally:
        with contextlib.suppress(redis.exceptions.LockError):  # held past its timeout
            lock.release()


def expire_old_versions(
    client: redis.Redis, prefix: str, set_name: str, keep: set[str | None], seconds: int
) -> list[str]:
    """Give every version not in `keep` (and its meta) a TTL of `seconds`, or remove it at once
    when `seconds` is 0; the names of those given one (or removed) now. An expiring version
    stays in the versions list, so `inspect` shows what a rollback can still reach, until its
    meta is gone."""
    vkey = versions_key(prefix, set_name)
    old = [v for v in (text_of(x) for x in client.zrange(vkey, 0, -1)) if v and v not in keep]
    expired = []
    for version in old:
        if client.exists(writing_key(prefix, set_name, version)):
            continue  # another push is writing it, to make it live
        meta = meta_key(prefix, set_name, version)
        meta_ttl = client.ttl(meta)
        if 0 < meta_ttl <= seconds:
            continue  # expiring already, as soon or sooner
        for batch in scan_batches(client, version_pattern(prefix, set_name, version)):
            pipe = client.pipeline(transaction=False)
            for k in batch:
                if seconds:  # LT: never later than it is (no TTL counts as infinite)
                    pipe.expire(k, seconds, lt=True)
                else:
                    pipe.unlink(k)
            pipe.execute()
        if meta_ttl == -2 or not seconds:  # gone (or a killed push's that never had a meta)
            client.unlink(meta)
            client.zrem(vkey, version)
            if meta_ttl != -2:
                expired.append(version)
            continue
        client.expire(meta, seconds, lt=True)
        expired.append(version)
    return expired


def version_memory(
    client: redis.Redis, prefix: str, set_name: str, version: str, count: int
) -> int | None:
    """Bytes Redis spends on a version of `count` items, estimated from a few of its keys'
    MEMORY USAGE; None when Redis refuses the command (a managed Redis may) or has no key."""
    sizes: list[int] = []
    for batch in scan_batches(client, version_pattern(prefix, set_name, version)):
        for key in batch[: _MEMORY_SAMPLE - len(sizes)]:
            try:
                used = client.memory_usage(key)
            except redis.ResponseError:
                return None
            if used:
                sizes.append(int(used))
        if len(sizes) >= _MEMORY_SAMPLE:
            break
    if not sizes:
        return None
    return round(sum(sizes) / len(sizes) * count)
