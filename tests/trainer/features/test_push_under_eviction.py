"""`ltr features push` under `maxmemory` with an allkeys-* policy: Redis evicted the live set
while the push ran, and the push said "the live version (v...) is unchanged" with Redis empty.
The failure now says what is live after it; the push warns about such a policy."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import redis
from typer.testing import CliRunner

from tests.support.redis_server import RedisServer
from tests.support.sourced_model import item_table
from trainer.cli import app
from trainer.features import redis_sets, set_writes
from trainer.features.redis_sets import PushError, eviction_warning, push_item_set

NAMES = ["x", "y"]


def test_a_push_that_fails_after_the_pointer_was_evicted_says_none_is_live(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = redis.Redis.from_url(redis_server.url)
    live = push_item_set(client, "ltr:", "s", item_table(20, NAMES, seed=1)).version
    client.config_set("maxmemory-policy", "allkeys-lru")
    real = set_writes.mismatches

    def evicted_meanwhile(c, packed, *args, **kwargs):
        client.flushall()  # as allkeys-lru under memory pressure: everything, pointer too
        return real(c, packed, *args, **kwargs)

    monkeypatch.setattr(redis_sets, "mismatches", evicted_meanwhile)
    with pytest.raises(PushError) as caught:
        push_item_set(client, "ltr:", "s", item_table(20, NAMES, seed=2))
    message = str(caught.value)
    assert "did not read back as written (it is absent: evicted or deleted)" in message
    assert "is unchanged" not in message
    assert f"the set now has NO live version in Redis (it was {live})" in message
    assert "maxmemory-policy is allkeys-lru" in message
    assert client.get("ltr:itemset:s") is None


def test_a_push_that_fails_after_another_switched_the_set_names_the_new_live_version(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = redis.Redis.from_url(redis_server.url)
    live = push_item_set(client, "ltr:", "s", item_table(20, NAMES, seed=1)).version
    real = set_writes.mismatches

    def clobbered(c, packed, *args, **kwargs):
        client.set("ltr:itemset:s", "other")
        client.set(packed.keys[0], b"????????")
        return real(c, packed, *args, **kwargs)

    monkeypatch.setattr(redis_sets, "mismatches", clobbered)
    with pytest.raises(PushError, match=rf"the live version is now other \(it was {live}"):
        push_item_set(client, "ltr:", "s", item_table(20, NAMES, seed=2))


@pytest.mark.parametrize(
    ("policy", "warned"),
    [("allkeys-lru", True), ("allkeys-lfu", True), ("volatile-lru", False), ("noeviction", False)],
)
def test_an_allkeys_policy_is_warned_about(
    redis_server: RedisServer, policy: str, warned: bool
) -> None:
    client = redis.Redis.from_url(redis_server.url)
    client.config_set("maxmemory-policy", policy)
    warning = eviction_warning(client)
    assert (warning is not None) == warned
    if warned:
        assert warning is not None and f"maxmemory-policy is {policy}" in warning
        assert "noeviction or a volatile-* policy" in warning


def test_a_redis_that_refuses_config_is_not_warned_about(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = redis.Redis.from_url(redis_server.url)
    client.config_set("maxmemory-policy", "allkeys-lru")

    def refused(*args: object, **kwargs: object) -> None:
        raise redis.ResponseError("unknown command 'CONFIG'")  # managed Redis renames it

    monkeypatch.setattr(redis.Redis, "config_get", refused)
    assert eviction_warning(client) is None


def test_push_command_warns_on_stderr_and_in_its_json(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    client = redis.Redis.from_url(redis_server.url)
    client.config_set("maxmemory-policy", "allkeys-lru")
    table = item_table(5, NAMES, seed=1)
    path = tmp_path / "items.parquet"
    columns = {"doc_id": table.ids.tolist(), **{n: table.matrix[:, j] for j, n in enumerate(NAMES)}}
    pq.write_table(pa.table(columns), path)
    args = ["features", "push", "--set", "s", "--items", str(path)]
    result = CliRunner().invoke(app, [*args, "--redis-url", redis_server.url, "--json"])
    assert result.exit_code == 0, result.output
    assert "warning: Redis's maxmemory-policy is allkeys-lru" in result.stderr
    assert "allkeys-lru" in json.loads(result.stdout)["warnings"][0]
