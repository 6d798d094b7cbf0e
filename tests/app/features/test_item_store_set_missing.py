"""An item set with no live version in Redis (a restart without persistence, FLUSHALL) is
logged once when that starts and once when it ends, per set: the state served every answer
degraded and logged nothing."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
import redis

from app.artifacts.manifest import ItemFeatureSet
from app.features.item_store import ItemFeatureStore
from app.features.redis_store import RedisStore
from tests.app.features.test_item_store import NAMES, WANTED, settings, snapshot_of
from tests.support.redis_server import RedisServer
from tests.support.sourced_model import item_table
from trainer.features.redis_sets import push_item_set

STORE_LOG = "app.features.redis_store"


def test_a_set_gone_from_redis_is_logged_when_it_goes_and_when_it_is_back(
    redis_server: RedisServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, STORE_LOG)
    client = redis.Redis.from_url(redis_server.url)
    table = item_table(20, NAMES, seed=4)
    push_item_set(client, "ltr:", "s", table)
    snap = snapshot_of(table, tmp_path)
    s = settings(redis_server.url)

    def lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == STORE_LOG]

    async def scenario() -> list[list[str]]:
        store = RedisStore(s)
        await store.start()
        items = ItemFeatureStore(s, store)
        wanted = ItemFeatureSet(set="s", names=NAMES)
        other = ItemFeatureSet(set="t", names=NAMES)
        reasons = []
        try:
            reasons.append((await items.fetch(wanted, WANTED, snap, ["d1"])).reasons)
            client.flushall()  # as a restart without persistence
            for _ in range(50):
                reasons.append((await items.fetch(wanted, WANTED, snap, ["d1"])).reasons)
                await items.fetch(other, WANTED, None, ["d1"])  # another set, never pushed
            push_item_set(client, "ltr:", "s", table)
            for _ in range(5):
                reasons.append((await items.fetch(wanted, WANTED, snap, ["d1"])).reasons)
        finally:
            await store.close()
        return reasons

    reasons = asyncio.run(scenario())
    assert reasons[0] == [] and reasons[-1] == []
    assert reasons[1] == ["item_set_missing_in_redis", "item_features_from_snapshot"]
    logged = lines()
    assert len(logged) == 3, logged
    assert logged[0].startswith("item set s has no live version in Redis ('ltr:itemset:s'")
    assert "ltr redis restore" in logged[0]
    assert logged[1].startswith("item set t has no live version in Redis")
    assert logged[2].startswith("item set s is live in Redis again after")
    client.close()


@pytest.mark.parametrize("cached_rows", [0, 1000])
def test_a_live_version_whose_keys_vanished_is_no_live_set(
    redis_server: RedisServer, tmp_path: Path, cached_rows: int
) -> None:
    """A race review: the pointer still named a version whose rows and meta had expired, and
    workers that had read it before served every item feature missing, `degraded: false`,
    for as long as they ran (workers started afterwards answered from the snapshot)."""
    client = redis.Redis.from_url(redis_server.url)
    table = item_table(20, NAMES, seed=4)
    version = push_item_set(client, "ltr:", "s", table).version
    snap = snapshot_of(table, tmp_path)
    s = settings(redis_server.url, item_row_cache_rows=cached_rows)

    async def scenario() -> list[tuple[list[str], bool]]:
        store = RedisStore(s)
        await store.start()
        items = ItemFeatureStore(s, store)
        wanted = ItemFeatureSet(set="s", names=NAMES)
        seen = []
        try:
            got = await items.fetch(wanted, WANTED, snap, ["d1"])
            seen.append((got.reasons, got.degraded))
            for key in client.scan_iter(match=f"ltr:item*:s:{version}:*"):
                client.delete(key)  # as its TTL would: the pointer stays
            for _ in range(3):
                got = await items.fetch(wanted, WANTED, snap, ["d2", "d3"])
                seen.append((got.reasons, got.degraded))
                assert got.missing == 0  # the snapshot's rows
        finally:
            await store.close()
        return seen

    seen = asyncio.run(scenario())
    assert seen[0] == ([], False)
    gone = (["item_set_missing_in_redis", "item_features_from_snapshot"], True)
    assert seen[1:] == [gone] * 3
    client.close()
