"""Item features from Redis (one pipelined fetch) with the snapshot as fallback."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
import redis

from app.artifacts.manifest import ItemFeatureSet
from app.features.item_redis import decode_rows
from app.features.item_snapshot import ItemSnapshot, write_snapshot
from app.features.item_store import ItemFeatureStore
from app.features.redis_store import RedisStore
from app.settings import Settings
from tests.support.redis_server import RedisServer
from tests.support.sourced_model import item_table
from trainer.features.redis_sets import push_item_set

NAMES = ["a", "b", "c"]
WANTED = ("c", "a")  # a subset, in another order


def settings(url: str | None, **extra: object) -> Settings:
    return Settings(redis_url=url, redis_deadline_ms=200, breaker_failure_threshold=1, **extra)  # type: ignore[arg-type]


def snapshot_of(table, tmp_path: Path) -> ItemSnapshot:  # type: ignore[no-untyped-def]
    write_snapshot(tmp_path, table.ids.tolist(), table.matrix)
    items = ItemFeatureSet(
        set="s",
        version=table.version(),
        names=table.names,
        matrix_file="items.npy",
        ids_file="item_ids.npy",
    )
    return ItemSnapshot.load(tmp_path, items)


def expected(table, ids: list[str]) -> np.ndarray:  # type: ignore[no-untyped-def]
    where = {i: k for k, i in enumerate(table.ids.tolist())}
    out = np.full((len(ids), len(WANTED)), np.nan, dtype=np.float32)
    for r, cid in enumerate(ids):
        if cid in where:
            out[r] = table.matrix[where[cid], [NAMES.index(n) for n in WANTED]]
    return out


async def fetch(s: Settings, ids: list[str], snapshot: ItemSnapshot | None = None):  # type: ignore[no-untyped-def]
    store = RedisStore(s)
    await store.start()
    try:
        items = ItemFeatureSet(set="s", names=NAMES)
        return await ItemFeatureStore(s, store).fetch(items, WANTED, snapshot, ids)
    finally:
        await store.close()


def test_snapshot_lookup_matches_the_table(tmp_path: Path) -> None:
    table = item_table(200, NAMES, seed=1)
    snap = snapshot_of(table, tmp_path)
    ids = ["d10", "zzz", "d0", "d199", "d1"]
    got = asyncio.run(fetch(settings(None), ids, snap))
    assert got.matrix.tobytes() == expected(table, ids).tobytes()
    assert got.missing == 1 and got.reasons == ["item_features_missing"] and not got.degraded
    assert got.backend == "snapshot"


def test_redis_fetch_follows_the_pointer(redis_server: RedisServer) -> None:
    client = redis.Redis.from_url(redis_server.url)
    first = item_table(100, NAMES, seed=1)
    push_item_set(client, "ltr:", "s", first)
    ids = ["d1", "d50", "nope"]

    async def twice() -> tuple:  # type: ignore[type-arg]
        s = settings(redis_server.url)
        store = RedisStore(s)
        await store.start()
        items = ItemFeatureSet(set="s", names=NAMES)
        item_store = ItemFeatureStore(s, store)
        try:
            before = await item_store.fetch(items, WANTED, None, ids)
            second = item_table(100, NAMES, seed=2)
            push_item_set(client, "ltr:", "s", second)
            after = await item_store.fetch(items, WANTED, None, ids)
            return before, after, second
        finally:
            await store.close()

    before, after, second = asyncio.run(twice())
    assert before.backend == "redis" and before.matrix.tobytes() == expected(first, ids).tobytes()
    assert before.missing == 1 and before.reasons == ["item_features_missing"]
    assert after.matrix.tobytes() == expected(second, ids).tobytes()  # the new version serves


def test_redis_down_falls_back_to_the_snapshot(redis_server: RedisServer, tmp_path: Path) -> None:
    table = item_table(30, NAMES, seed=3)
    snap = snapshot_of(table, tmp_path)
    url = redis_server.url
    redis_server.kill()
    got = asyncio.run(fetch(settings(url), ["d1", "d2"], snap))
    assert got.degraded and got.backend == "snapshot"
    assert got.reasons[0] == "item_store_redis_unavailable"
    assert "item_features_from_snapshot" in got.reasons
    assert got.matrix.tobytes() == expected(table, ["d1", "d2"]).tobytes()


def test_redis_paused_answers_within_the_deadline(redis_server: RedisServer) -> None:
    push_item_set(redis.Redis.from_url(redis_server.url), "ltr:", "s", item_table(10, NAMES))
    redis_server.pause()
    try:
        s = settings(redis_server.url)
        loop = asyncio.new_event_loop()
        started = loop.time()
        got = loop.run_until_complete(fetch(s, ["d1"]))
        elapsed = loop.time() - started
        loop.close()
    finally:
        redis_server.resume()
    assert got.degraded and got.missing == 1 and np.isnan(got.matrix).all()
    assert got.reasons == ["item_store_redis_timeout", "item_features_unavailable"]
    assert elapsed < 1.0  # 200 ms deadline (plus the start's own PING)


def test_a_set_without_the_model_features_is_a_mismatch(redis_server: RedisServer) -> None:
    push_item_set(redis.Redis.from_url(redis_server.url), "ltr:", "s", item_table(5, ["a", "b"]))
    got = asyncio.run(fetch(settings(redis_server.url), ["d1"]))
    assert got.reasons == ["item_set_mismatch", "item_features_unavailable"] and got.degraded


def test_no_live_set_is_reported_by_its_documented_name(redis_server: RedisServer) -> None:
    got = asyncio.run(fetch(settings(redis_server.url), ["d1"]))
    assert got.reasons[0] == "item_set_missing_in_redis"


def test_a_pointer_to_a_version_without_meta_is_no_live_set(redis_server: RedisServer) -> None:
    redis.Redis.from_url(redis_server.url).set("ltr:itemset:s", "v-gone")
    got = asyncio.run(fetch(settings(redis_server.url), ["d1"]))
    assert got.reasons == ["item_set_missing_in_redis", "item_features_unavailable"]


def test_a_blank_redis_url_is_no_redis() -> None:
    assert Settings(redis_url="  ").redis_url is None
    assert Settings(redis_url="").redis_url is None


def test_snapshot_setting_never_asks_redis(redis_server: RedisServer, tmp_path: Path) -> None:
    table = item_table(5, NAMES)
    got = asyncio.run(
        fetch(
            settings(redis_server.url, item_store="snapshot"), ["d1"], snapshot_of(table, tmp_path)
        )
    )
    assert got.backend == "snapshot" and not got.degraded


@pytest.mark.parametrize("ids", [["d1"], ["d1", "d1x", "d2"]])
def test_malformed_values_are_missing_and_reported(
    redis_server: RedisServer, ids: list[str]
) -> None:
    client = redis.Redis.from_url(redis_server.url)
    result = push_item_set(client, "ltr:", "s", item_table(5, NAMES))
    client.set(f"ltr:item:s:{result.version}:d1", b"\x00\x01")  # 2 bytes, not 12
    got = asyncio.run(fetch(settings(redis_server.url), ids))
    assert np.isnan(got.matrix[0]).all() and "item_features_malformed" in got.reasons


@pytest.mark.parametrize("absent, short", [(0.0, 0.0), (0.2, 0.0), (0.0, 0.1), (0.3, 0.2)])
def test_decode_rows_equals_a_row_by_row_decode(absent: float, short: float) -> None:
    """The all-present fast path and the general path agree with decoding row by row."""
    rng = np.random.default_rng(int(absent * 10 + short * 100))
    width = 7
    values: list[bytes | None] = []
    for _ in range(300):
        row = rng.standard_normal(width).astype("<f4").tobytes()
        u = rng.random()
        values.append(None if u < absent else row[:-4] if u < absent + short else row)
    rows, found, malformed = decode_rows(values, width)
    for r, v in enumerate(values):
        ok = v is not None and len(v) == 4 * width
        assert found[r] == ok
        want = np.frombuffer(v, "<f4") if ok and v is not None else np.full(width, np.nan)
        np.testing.assert_array_equal(rows[r], want)
    assert malformed == sum(v is not None and len(v) != 4 * width for v in values)
