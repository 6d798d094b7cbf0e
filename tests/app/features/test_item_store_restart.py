"""A Redis restart that is over before the next request costs the item store no request:
the pipelined item fetch (pointer + MGET on a pooled connection) retries once on a fresh
connection, as single commands do. It answered degraded (redis_unavailable, from the
snapshot) on the first request after every restart."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import redis

from app.artifacts.manifest import ItemFeatureSet
from app.features import item_redis
from app.features.item_store import ItemFeatureStore
from app.features.redis_store import REDIS_TIMEOUT, RedisStore
from tests.app.features.test_item_store import NAMES, WANTED, settings, snapshot_of
from tests.support.redis_server import RedisServer
from tests.support.sourced_model import item_table
from trainer.features.redis_sets import push_item_set


@pytest.mark.parametrize("row_cache", [0, 1000])
def test_a_restarted_redis_costs_the_item_store_no_request(
    redis_server: RedisServer, tmp_path: Path, row_cache: int
) -> None:
    table = item_table(20, NAMES, seed=3)
    client = redis.Redis.from_url(redis_server.url)
    push_item_set(client, "ltr:", "s", table)
    client.close()
    snap = snapshot_of(table, tmp_path)
    s = settings(redis_server.url, item_row_cache_rows=row_cache)
    wanted = ItemFeatureSet(set="s", names=NAMES)

    async def scenario() -> list[Any]:
        store = RedisStore(s)
        await store.start()
        items = ItemFeatureStore(s, store)
        try:
            # Several at once: several pooled connections, all closed by the restart.
            first = await asyncio.gather(
                *(items.fetch(wanted, WANTED, snap, [f"d{i}"]) for i in range(4))
            )
            redis_server.restart()  # empty (no persistence): restored as `ltr redis restore`
            again = redis.Redis.from_url(redis_server.url)
            push_item_set(again, "ltr:", "s", table)
            again.close()
            # Rows not cached yet, so the row cache cannot answer without Redis.
            after = await asyncio.gather(
                *(items.fetch(wanted, WANTED, snap, [f"d{i}"]) for i in range(4, 8))
            )
            return [*first, *after]
        finally:
            await store.close()

    for got in asyncio.run(scenario()):
        assert got.reasons == [] and not got.degraded, got.reasons
        assert got.backend == "redis"


def test_a_timeout_is_not_retried(redis_server: RedisServer, tmp_path: Path) -> None:
    """Retrying a timed-out read would spend the deadline twice."""
    table = item_table(5, NAMES, seed=3)
    client = redis.Redis.from_url(redis_server.url)
    push_item_set(client, "ltr:", "s", table)
    client.close()
    s = settings(redis_server.url)
    sent: list[bytes] = []

    async def scenario() -> Any:
        store = RedisStore(s)
        await store.start()
        items = ItemFeatureStore(s, store)
        wanted = ItemFeatureSet(set="s", names=NAMES)
        try:
            await items.fetch(wanted, WANTED, None, ["d1"])  # learns the live version
            redis_server.pause()
            try:
                got = await items.fetch(wanted, WANTED, None, ["d2"])
                # The timed-out read goes on in the background until the socket timeout
                # (2 deadlines): a retry would come after that.
                await asyncio.sleep(0.6)
                return got
            finally:
                redis_server.resume()
        finally:
            await store.close()

    real = item_redis._exchange

    async def counted(conn: Any, packed: bytes, mget: bool) -> list[Any]:
        sent.append(packed)
        return await real(conn, packed, mget)

    mp = pytest.MonkeyPatch()
    mp.setattr(item_redis, "_exchange", counted)
    try:
        got = asyncio.run(scenario())
    finally:
        mp.undo()
    assert f"item_store_{REDIS_TIMEOUT}" in got.reasons
    assert len(sent) == 2  # the first fetch's and the timed-out one's: no second try
