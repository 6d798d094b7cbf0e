"""Names, SCAN patterns and completeness of item feature sets' keys in Redis.

A set name or version is part of keys and of SCAN patterns: a set named `p*` matched the keys of
a set `prod`, and expiring "its" old versions put a TTL on prod's live items. So names must
match NAME_PATTERN (as `ltr train --item-set` requires), and every pattern built from text
(the key prefix is free text) has its glob characters escaped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import redis

from app.artifacts.manifest import NAME_PATTERN
from app.errors import LtrError
from app.features.item_redis import item_prefix

SCAN_COUNT = 10_000
_GLOB = re.compile(r"([*?\[\]\\])")


class SetNameError(LtrError, ValueError):
    """A set name or version that cannot be part of a Redis key."""


def check_name(kind: str, value: str) -> str:
    """`value` when it is a valid `kind` ("item set", "version") name, else SetNameError."""
    if not re.fullmatch(NAME_PATTERN, value):
        raise SetNameError(f"{kind} name {value!r} must match {NAME_PATTERN}")
    return value


def text_of(raw: Any) -> str | None:
    """A Redis reply's text, stripped; None for no reply or an empty one."""
    if raw is None:
        return None
    return (raw.decode() if isinstance(raw, bytes) else str(raw)).strip() or None


def glob_escape(text: str) -> str:
    """`text` matched literally in a SCAN/KEYS pattern."""
    return _GLOB.sub(r"\\\1", text)


def version_pattern(prefix: str, set_name: str, version: str) -> str:
    """SCAN pattern of exactly the item keys of one version."""
    return glob_escape(item_prefix(prefix, set_name, version)) + "*"


def scan_batches(
    client: redis.Redis, match: str, scan_count: int = SCAN_COUNT
) -> Iterator[list[Any]]:
    cursor: int = 0
    while True:
        cursor, keys = client.scan(cursor=cursor, match=match, count=scan_count)
        if keys:
            yield list(keys)
        if cursor == 0:
            return


def item_counts(
    client: redis.Redis, prefix: str, set_name: str, widths: dict[str, int]
) -> dict[str, int]:
    """For each version in `widths`: how many distinct item keys hold a value of exactly
    `widths[version]` bytes (a version is complete when that is its meta's count)."""
    heads = {v: item_prefix(prefix, set_name, v).encode() for v in widths}
    if len(widths) == 1:
        (only,) = widths
        match = version_pattern(prefix, set_name, only)
    else:  # one pass over the keyspace for all of them
        match = glob_escape(f"{prefix}item:{set_name}:") + "*"
    seen: set[bytes] = set()  # SCAN may return a key more than once
    counts = dict.fromkeys(widths, 0)
    for batch in scan_batches(client, match):
        keys = dict.fromkeys(k if isinstance(k, bytes) else str(k).encode() for k in batch)
        fresh = [k for k in keys if k not in seen]
        seen.update(fresh)
        pipe = client.pipeline(transaction=False)
        for key in fresh:
            pipe.strlen(key)
        for key, size in zip(fresh, pipe.execute(), strict=True):
            for version, head in heads.items():
                if key.startswith(head) and size == widths[version]:
                    counts[version] += 1
    return counts
