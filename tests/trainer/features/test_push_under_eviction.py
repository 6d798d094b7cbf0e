"""`ltr features push` under `maxmemory` with an allkeys-* policy: Redis evicted the live set
while the push ran, and the push said "the live version (v...) is unchanged" with Redis empty.
The failure now says what is live after it; the push warns about such a policy."""

from __future__ import annotations

import json
from collections.abc import Callable
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
        client.set("ltr:itemset:s:other:meta", b'{"names": ["x", "y"], "count": 0}')
        client.set("ltr:itemset:s", "other")
        client.set(packed.keys[0], b"????????")
        return real(c, packed, *args, **kwargs)

    monkeypatch.setattr(redis_sets, "mismatches", clobbered)
    with pytest.raises(PushError, match=rf"another version other is live now \(it was {live}"):
        push_item_set(client, "ltr:", "s", item_table(20, NAMES, seed=2))


def test_a_push_that_fails_after_the_pointer_moved_to_a_version_without_meta_says_so(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = redis.Redis.from_url(redis_server.url)
    live = push_item_set(client, "ltr:", "s", item_table(20, NAMES, seed=1)).version
    # A pointer set by hand to a version never pushed: the service sees no live set.
    _fails_verification(monkeypatch, lambda: client.set("ltr:itemset:s", "other"))
    with pytest.raises(PushError) as caught:
        push_item_set(client, "ltr:", "s", item_table(20, NAMES, seed=2))
    assert (
        f"the pointer now names other (it was {live}: another push or rollback?), a version "
        "whose meta is not in Redis: the service sees no live set"
    ) in str(caught.value)


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


def _fails_verification(monkeypatch: pytest.MonkeyPatch, meanwhile: Callable[[], None]) -> None:
    """The next push's read-back finds its first item clobbered, after `meanwhile` ran."""
    real = set_writes.mismatches

    def clobbered(c, packed, *args, **kwargs):  # type: ignore[no-untyped-def]
        meanwhile()
        c.set(packed.keys[0], b"????????")
        return real(c, packed, *args, **kwargs)

    monkeypatch.setattr(redis_sets, "mismatches", clobbered)


def test_a_failed_first_push_says_none_is_live_not_none_unchanged(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = redis.Redis.from_url(redis_server.url)
    _fails_verification(monkeypatch, lambda: None)
    with pytest.raises(PushError) as caught:
        push_item_set(client, "ltr:", "s", item_table(20, NAMES, seed=2))
    message = str(caught.value)
    assert "no version is live (none was before)" in message
    assert "None" not in message and "is unchanged" not in message


def test_a_failed_push_whose_live_meta_was_evicted_says_the_service_sees_no_live_set(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pointer survived eviction, its version's meta did not: the service reads no live
    set there, and the push said "the live version (v...) is unchanged"."""
    client = redis.Redis.from_url(redis_server.url)
    live = push_item_set(client, "ltr:", "s", item_table(20, NAMES, seed=1)).version

    def evicted() -> None:  # as allkeys-lru would: the meta and 15 of the 20 rows
        client.delete(f"ltr:itemset:s:{live}:meta")
        client.delete(*[f"ltr:item:s:{live}:d{i}" for i in range(15)])

    _fails_verification(monkeypatch, evicted)
    with pytest.raises(PushError) as caught:
        push_item_set(client, "ltr:", "s", item_table(20, NAMES, seed=2))
    message = str(caught.value)
    assert "is unchanged" not in message
    assert (
        f"the pointer still names {live} but Redis evicted its meta (and 15 of 20 rows): the "
        "service sees no live set; push again with noeviction or a volatile-* policy"
    ) in message


def test_a_failed_first_push_names_a_version_another_push_made_live(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = redis.Redis.from_url(redis_server.url)

    def pushed_meanwhile() -> None:
        monkeypatch.undo()  # that push is not clobbered (this one already is)
        push_item_set(client, "ltr:", "s", item_table(20, NAMES, seed=1))

    first = item_table(20, NAMES, seed=1).version()
    _fails_verification(monkeypatch, pushed_meanwhile)
    with pytest.raises(PushError) as caught:
        push_item_set(client, "ltr:", "s", item_table(20, NAMES, seed=2))
    message = str(caught.value)
    assert f"another version {first} is live now (none was live before" in message
    assert "None" not in message
