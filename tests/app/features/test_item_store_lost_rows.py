"""Rows Redis lost under the snapshot's own version come from the snapshot; under another
version an absent id stays missing; a meta that does not describe its rows is no answer."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
import redis

from app.features.item_snapshot import ItemSnapshot
from tests.app.features.test_item_store import NAMES, expected, fetch, settings, snapshot_of
from tests.support.redis_server import RedisServer
from tests.support.sourced_model import item_table
from trainer.features.redis_sets import push_item_set

IDS = ["d1", "d2", "d3", "d4", "nope"]


def test_rows_redis_lost_come_from_the_snapshot_of_the_same_version(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    client = redis.Redis.from_url(redis_server.url)
    table = item_table(20, NAMES, seed=4)
    version = push_item_set(client, "ltr:", "s", table).version
    head = f"ltr:item:s:{version}:"
    client.delete(head + "d1")  # evicted
    client.set(head + "d2", b"\x00\x01")  # malformed
    client.delete(head + "d3")
    client.hset(head + "d3", "x", "1")  # the wrong Redis type: MGET answers nil
    got = asyncio.run(fetch(settings(redis_server.url), IDS, snapshot_of(table, tmp_path)))
    assert got.matrix.tobytes() == expected(table, IDS).tobytes()
    assert got.reasons == [
        "item_rows_lost_in_redis",
        "item_features_from_snapshot",
        "item_features_malformed",
        "item_features_missing",  # "nope": in neither
    ]
    assert got.degraded and got.missing == 1 and got.backend == "redis"


def test_under_another_version_an_absent_id_is_not_in_the_catalog(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    client = redis.Redis.from_url(redis_server.url)
    snap = snapshot_of(item_table(20, NAMES, seed=4), tmp_path)
    remote = item_table(20, NAMES, seed=5)
    version = push_item_set(client, "ltr:", "s", remote).version
    client.delete(f"ltr:item:s:{version}:d1")
    got = asyncio.run(fetch(settings(redis_server.url), ["d1", "d2"], snap))
    assert np.isnan(got.matrix[0]).all()
    assert got.matrix[1].tobytes() == expected(remote, ["d2"])[0].tobytes()
    assert got.reasons == ["item_features_missing"] and not got.degraded


def test_all_rows_present_never_asks_the_snapshot(
    redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = item_table(20, NAMES, seed=4)
    push_item_set(redis.Redis.from_url(redis_server.url), "ltr:", "s", table)
    snap = snapshot_of(table, tmp_path)

    def refused(*args: Any) -> Any:
        raise AssertionError("the snapshot was looked up")

    monkeypatch.setattr(ItemSnapshot, "lookup", refused)
    got = asyncio.run(fetch(settings(redis_server.url), IDS[:4], snap))
    assert got.reasons == [] and got.matrix.tobytes() == expected(table, IDS[:4]).tobytes()


@pytest.mark.parametrize("meta_names", [[*NAMES, "x"], ["c", "a"]])
@pytest.mark.parametrize("same_version", [True, False])
def test_a_meta_that_does_not_describe_the_rows_falls_back_to_the_snapshot(
    redis_server: RedisServer, tmp_path: Path, meta_names: list[str], same_version: bool
) -> None:
    client = redis.Redis.from_url(redis_server.url)
    table = item_table(20, NAMES, seed=4)
    snap = snapshot_of(table, tmp_path)
    remote = table if same_version else item_table(20, NAMES, seed=5)
    version = push_item_set(client, "ltr:", "s", remote).version
    client.set(f"ltr:itemset:s:{version}:meta", orjson.dumps({"names": meta_names}))
    got = asyncio.run(fetch(settings(redis_server.url), ["d1", "d2"], snap))
    assert got.matrix.tobytes() == expected(table, ["d1", "d2"]).tobytes()
    assert got.degraded and got.missing == 0
    assert "item_features_malformed" in got.reasons
    assert "item_features_from_snapshot" in got.reasons
