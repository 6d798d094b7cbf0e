"""How long an item set's versions pushed over stay in Redis, and what a version takes there.

After a switch (a push or a rollback) Redis keeps the live version and the one it replaced (a
rollback's target) without a TTL; every other version gets `LTR_ITEM_SET_OLD_TTL_SECONDS`
(default a day) and vanishes. A set pushed every hour thus holds up to a day of versions at
once, each as large as the live one (about 535 MB for 1M items x 100 features), which a Redis
sized for two versions refuses under `noeviction`: the setting is how an operator trades
rollback reach for memory, and 0 removes such versions at the switch.
"""

from __future__ import annotations

import os

import redis

from app.errors import LtrError
from app.features.item_redis import meta_key
from trainer.features.set_keys import scan_batches, text_of, version_pattern

OLD_TTL_ENV = "LTR_ITEM_SET_OLD_TTL_SECONDS"
DEFAULT_OLD_TTL_SECONDS = 24 * 3600
_MEMORY_SAMPLE = 5  # item keys whose MEMORY USAGE estimates a version's


class RetentionError(LtrError, ValueError):
    """A TTL for old versions that is not a whole number of seconds >= 0."""


def old_version_ttl(seconds: int | None = None) -> int:
    """`seconds` if given, else LTR_ITEM_SET_OLD_TTL_SECONDS, else a day; RetentionError for a
    value that is not a whole number >= 0 (naming the variable it came from)."""
    if seconds is not None:
        if seconds < 0:
            raise RetentionError(f"the TTL of old item set versions must be >= 0, not {seconds}")
        return seconds
    text = os.environ.get(OLD_TTL_ENV, "").strip()
    if not text:
        return DEFAULT_OLD_TTL_SECONDS
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise RetentionError(f"{OLD_TTL_ENV}={text!r}: expected a whole number of seconds >= 0")
    return value


def versions_key(prefix: str, set_name: str) -> str:
    """Sorted set of the set's versions (score: push time), for expiry and inspection."""
    return f"{prefix}itemset:{set_name}:versions"


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
        meta = meta_key(prefix, set_name, version)
        meta_ttl = client.ttl(meta)
        if meta_ttl > 0 and seconds > 0:
            continue  # expiring already
        for batch in scan_batches(client, version_pattern(prefix, set_name, version)):
            pipe = client.pipeline(transaction=False)
            for k in batch:
                if seconds:
                    pipe.expire(k, seconds, nx=True)
                else:
                    pipe.unlink(k)
            pipe.execute()
        if meta_ttl == -2 or not seconds:  # gone (or a killed push's that never had a meta)
            client.unlink(meta)
            client.zrem(vkey, version)
            if meta_ttl != -2:
                expired.append(version)
            continue
        client.expire(meta, seconds, nx=True)
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
