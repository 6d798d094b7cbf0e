"""The worker's cache of item rows read from Redis: only the rows it lacks are asked for, the
rows served are Redis's own, and a pointer switched by a push is followed at once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from itertools import pairwise
from typing import Any

import numpy as np
import redis

from app.artifacts.manifest import ItemFeatureSet
from app.features.item_row_cache import MISSING, ROWS, ItemRowCache
from app.features.item_store import ItemFeatureStore
from app.features.redis_store import RedisStore
from app.settings import Settings
from tests.app.features.test_item_store import NAMES, WANTED, expected
from tests.support.redis_server import RedisServer
from tests.support.sourced_model import item_table
from trainer.features.redis_sets import push_item_set


def test_rows_are_kept_per_version_and_bounded() -> None:
    cache = ItemRowCache(3)
    cache.keep("s", "v1", ["a", "b", "e"], [b"A", None, b"EE"], size=1)
    rows, lacking = cache.lookup("s", "v1", ["b", "c", "a", "e"])
    # Absent and malformed rows are asked of Redis again: a push may repair what Redis lost.
    assert rows == [MISSING, MISSING, b"A", MISSING] and lacking == [0, 1, 3]
    cache.keep("s", "v1", ["c", "d", "b"], [b"C", b"D", b"B"], 1)
    assert len(cache) == 3  # the oldest row ("a") went first
    assert cache.lookup("s", "v1", ["a", "d"])[1] == [0]
    assert cache.lookup("s", "v2", ["c"])[1] == [0]  # another version: nothing
    cache.keep("s", "v2", ["c"], [b"C2"], 2)
    assert len(cache) == 1 and cache.lookup("s", "v1", ["d"])[1] == [0]


def test_an_empty_cache_keeps_nothing() -> None:
    cache = ItemRowCache(0)
    cache.keep("s", "v1", ["a"], [b"A"], 1)
    assert not cache.enabled and len(cache) == 0


def mgets(client: redis.Redis) -> int:
    return int(client.info("commandstats").get("cmdstat_mget", {}).get("calls", 0))


def hits() -> float:
    return float(ROWS.labels("hit")._value.get())


def misses() -> float:
    return float(ROWS.labels("miss")._value.get())


async def fetches(
    url: str,
    rows: int,
    batches: list[list[Any]],
    probe: redis.Redis,
    first: Callable[[int], None] = lambda k: None,
) -> list[Any]:
    """Each batch's ItemFeatures and the MGETs it sent, through one store; `first(k)` runs
    before batch k."""
    s = Settings(redis_url=url, redis_deadline_ms=2000, item_row_cache_rows=rows)
    store = RedisStore(s)
    await store.start()
    items = ItemFeatureSet(set="s", names=NAMES)
    item_store = ItemFeatureStore(s, store)
    out = []
    try:
        for k, ids in enumerate(batches):
            first(k)
            before = mgets(probe)
            got = await item_store.fetch(items, WANTED, None, ids)
            out.append((got, mgets(probe) - before))
    finally:
        await store.close()
    return out


def test_cached_rows_are_not_asked_again(redis_server: RedisServer) -> None:
    client = redis.Redis.from_url(redis_server.url)
    table = item_table(50, NAMES, seed=4)
    push_item_set(client, "ltr:", "s", table)
    first, again, more = ["d1", "d7", "nope"], ["nope", "d7", "d1"], ["d7", "d9", 3]
    hits_before, misses_before = hits(), misses()
    (a, a_calls), (b, b_calls), (c, c_calls) = asyncio.run(
        fetches(redis_server.url, 100, [first, again, more], client)
    )
    assert a.matrix.tobytes() == expected(table, first).tobytes() and a_calls == 1
    # "nope" is asked again: an absence is not cached (a re-push may fill it).
    assert b.matrix.tobytes() == expected(table, again).tobytes() and b_calls == 1
    assert b.missing == 1 and b.reasons == ["item_features_missing"]
    assert c.matrix.tobytes() == expected(table, ["d7", "d9", "3"]).tobytes() and c_calls == 1
    assert hits() - hits_before == 3  # again: d7, d1; more: d7
    assert misses() - misses_before == 6  # first: 3; again: nope; more: d9, 3


def test_without_the_cache_every_row_is_asked(redis_server: RedisServer) -> None:
    client = redis.Redis.from_url(redis_server.url)
    table = item_table(20, NAMES, seed=5)
    push_item_set(client, "ltr:", "s", table)
    got = asyncio.run(fetches(redis_server.url, 0, [["d1", "d2"], ["d1", "d2"]], client))
    assert [calls for _, calls in got] == [1, 1]
    assert all(g.matrix.tobytes() == expected(table, ["d1", "d2"]).tobytes() for g, _ in got)


def test_a_small_cache_serves_what_redis_holds(redis_server: RedisServer) -> None:
    """Random batches through a 7-row cache, a push in the middle: every answer is the live
    version's rows, as if nothing were cached."""
    client = redis.Redis.from_url(redis_server.url)
    tables = [item_table(40, NAMES, seed=6), item_table(40, NAMES, seed=7)]
    push_item_set(client, "ltr:", "s", tables[0])
    rng = np.random.default_rng(8)
    batches = [[f"d{k}" for k in rng.choice(45, 6, replace=False)] for _ in range(40)]

    def push_the_second(k: int) -> None:
        if k == 20:
            push_item_set(client, "ltr:", "s", tables[1])

    answers = asyncio.run(fetches(redis_server.url, 7, batches, client, push_the_second))
    for k, (ids, (got, _)) in enumerate(zip(batches, answers, strict=True)):
        table = tables[0] if k < 20 else tables[1]
        assert got.matrix.tobytes() == expected(table, ids).tobytes(), k
        assert not got.degraded


def test_rows_read_after_a_push_count_as_misses(redis_server: RedisServer) -> None:
    """The pointer moved: the rows the cache held for the old version are not served and not
    counted as hits; the new version's are read and counted as misses."""
    client = redis.Redis.from_url(redis_server.url)
    tables = [item_table(10, NAMES, seed=9), item_table(10, NAMES, seed=10)]
    push_item_set(client, "ltr:", "s", tables[0])
    ids = ["d1", "d2"]
    counts: list[tuple[float, float]] = []

    def push_the_second(k: int) -> None:
        counts.append((hits(), misses()))
        if k == 2:
            push_item_set(client, "ltr:", "s", tables[1])

    got = asyncio.run(fetches(redis_server.url, 100, [ids, ids, ids], client, push_the_second))
    counts.append((hits(), misses()))
    steps = [(h1 - h0, m1 - m0) for (h0, m0), (h1, m1) in pairwise(counts)]
    assert steps == [(0, 2), (2, 0), (0, 2)]
    assert got[2][0].matrix.tobytes() == expected(tables[1], ids).tobytes()
