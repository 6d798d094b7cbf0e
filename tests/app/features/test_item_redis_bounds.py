"""A huge value under the set's pointer or meta key is read only up to a bound: it is the
set's fault (no live set, malformed meta), not Redis's, and never pulled whole."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest
import redis

from app.artifacts.manifest import ItemFeatureSet
from app.features.item_store import ItemFeatures, ItemFeatureStore
from app.features.redis_store import RedisStore
from app.settings import Settings
from tests.app.features.test_item_store import NAMES, WANTED, expected, settings, snapshot_of
from tests.support.redis_server import RedisServer
from tests.support.sourced_model import item_table
from trainer.features.redis_sets import push_item_set

HUGE = 20 * 1024 * 1024
IDS = ["d1", "d2"]


def sent_bytes(client: redis.Redis) -> int:
    return int(client.info("stats")["total_net_output_bytes"])


async def fetches(s: Settings, rounds: int, between: object = None) -> list[ItemFeatures]:
    """`rounds` fetches through one store (the later ones under the version it saw);
    `between` runs after the first."""
    store = RedisStore(s)
    await store.start()
    items = ItemFeatureSet(set="s", names=NAMES)
    item_store = ItemFeatureStore(s, store)
    got = []
    try:
        for k in range(rounds):
            got.append(await item_store.fetch(items, WANTED, None, IDS))
            if k == 0 and callable(between):
                between()
        assert store.breaker.state == "closed"
        return got
    finally:
        await store.close()


@pytest.mark.parametrize("row_cache", [0, 100])
def test_a_huge_pointer_is_no_live_set_and_is_not_pulled(
    redis_server: RedisServer, row_cache: int
) -> None:
    client = redis.Redis.from_url(redis_server.url)
    table = item_table(10, NAMES)
    push_item_set(client, "ltr:", "s", table)
    before: list[int] = []

    def overwrite() -> None:
        client.set("ltr:itemset:s", b"v" * HUGE)
        before.append(sent_bytes(client))

    s = settings(redis_server.url, item_row_cache_rows=row_cache)
    got = asyncio.run(fetches(s, 4, overwrite))
    assert got[0].reasons == [] and got[0].matrix.tobytes() == expected(table, IDS).tobytes()
    # Once under the version last seen (pipelined), then with none seen (pointer alone).
    for answer in got[1:]:
        assert answer.reasons == ["item_set_missing_in_redis", "item_features_unavailable"]
    assert sent_bytes(client) - before[0] < 64 * 1024


def test_a_huge_pointer_falls_back_to_the_snapshot(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    client = redis.Redis.from_url(redis_server.url)
    table = item_table(10, NAMES)
    client.set("ltr:itemset:s", b"v" * HUGE)
    s = settings(redis_server.url)

    async def one() -> ItemFeatures:
        store = RedisStore(s)
        await store.start()
        try:
            items = ItemFeatureSet(set="s", names=NAMES)
            snap = snapshot_of(table, tmp_path)
            return await ItemFeatureStore(s, store).fetch(items, WANTED, snap, IDS)
        finally:
            await store.close()

    got = asyncio.run(one())
    assert got.reasons == ["item_set_missing_in_redis", "item_features_from_snapshot"]
    assert got.matrix.tobytes() == expected(table, IDS).tobytes()


def test_a_meta_past_its_bound_is_malformed(redis_server: RedisServer) -> None:
    client = redis.Redis.from_url(redis_server.url)
    version = push_item_set(client, "ltr:", "s", item_table(10, NAMES)).version
    meta = {"names": NAMES, "padding": "x" * (2 * 1024 * 1024)}
    client.set(f"ltr:itemset:s:{version}:meta", orjson.dumps(meta))
    start = sent_bytes(client)
    got = asyncio.run(fetches(settings(redis_server.url), 2))
    for answer in got:
        assert answer.reasons == ["item_set_meta_malformed", "item_features_unavailable"]
    assert sent_bytes(client) - start < 2 * (1024 * 1024 + 64 * 1024)
