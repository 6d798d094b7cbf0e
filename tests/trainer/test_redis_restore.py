"""`ltr redis restore` after Redis lost its data: every deployed version's user embeddings
and item set back, what is intact left alone, then an announcement. Before it, a Redis that
restarted empty served every answer degraded until someone re-pushed each piece by hand."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import redis
from typer.testing import CliRunner

from app.artifacts.manifest import FeatureSource
from app.artifacts.store import set_current
from app.artifacts.tree_dump import TreeEnsemble
from app.registry.experiments import write_active
from tests.app.features.conftest import CLUSTERS
from tests.support import stump
from tests.support.experiments import interleave_spec
from tests.support.redis_server import RedisServer
from tests.support.sourced_model import item_table, publish_sourced
from tests.trainer.test_publish_user_clusters import user_version
from trainer.cli import app
from trainer.features.item_table import ItemTable
from trainer.publish import publish

NAMES = ["price", "ctr"]


def shop_version(registry: Path, version: str, table: ItemTable, snapshot: bool = True) -> Path:
    """`shop/<version>` (CURRENT → it), its two features from the item set `catalog`."""
    sources: dict[str, FeatureSource] = dict.fromkeys(NAMES, "item")
    return publish_sourced(
        registry,
        TreeEnsemble(2, [stump()]),
        sources,
        table,
        name="shop",
        version=version,
        feature_names=NAMES,
        snapshot=snapshot,
    )


def users_model(tmp_path: Path, server: RedisServer) -> tuple[Path, redis.Redis]:
    """A registry with model `m` v1 deployed (user embeddings), not pushed; a client."""
    registry = tmp_path / "registry"
    publish(user_version(tmp_path / "runs", "v1", CLUSTERS, ["US", "FR"]), registry)
    return registry, redis.Redis.from_url(server.url)


def restore(registry: Path, url: str, *extra: str) -> tuple[int, dict, str]:  # type: ignore[type-arg]
    args = ["redis", "restore", "--registry", str(registry), "--redis-url", url, "--json"]
    result = CliRunner().invoke(app, [*args, *extra])
    return result.exit_code, json.loads(result.stdout.splitlines()[-1]), result.stderr


def states(report: dict) -> dict[tuple[str, str], tuple[str, str]]:  # type: ignore[type-arg]
    return {
        (v["model"], v["version"]): (v["embeddings"], v["item_set_state"])
        for v in report["versions"]
    }


def test_restore_after_flushall_puts_back_what_every_deployed_version_needs(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    registry, client = users_model(tmp_path, redis_server)
    live, candidate = item_table(30, NAMES, seed=1), item_table(30, NAMES, seed=2)
    shop_version(registry, "v2", candidate)
    shop_version(registry, "v1", live)  # CURRENT; v2 is the running experiment's candidate
    write_active(registry, interleave_spec(model="shop", control="v1", candidate="v2"))
    client.flushall()  # a restart without persistence
    listener = client.pubsub(ignore_subscribe_messages=True)
    listener.subscribe("ltr:events")

    code, report, stderr = restore(registry, redis_server.url)
    assert code == 0, stderr
    heard = [listener.get_message(timeout=1.0) for _ in range(4)]  # the first: the subscribe
    assert [json.loads(m["data"]) for m in heard if m] == [
        {"model": "m", "version": "v1"},
        {"model": "shop", "version": "v1"},
    ]
    listener.close()
    assert report["status"] == "ok" and report["errors"] == []
    assert states(report) == {
        ("m", "v1"): ("restored", "none"),
        ("shop", "v1"): ("none", "restored"),
        ("shop", "v2"): ("none", "kept"),  # one live version per set: CURRENT's
    }
    assert report["announced"] == ["m", "shop"]
    cluster_us = client.hget("ltr:emb:m:v1", "US")
    assert cluster_us == np.ones(3, dtype="<f4").tobytes()  # row 1 of the table is all 1
    assert client.hlen("ltr:emb:m:v1") == len(CLUSTERS)
    assert client.get("ltr:itemset:catalog") == live.version().encode()
    expected = np.ascontiguousarray(live.matrix[7], dtype="<f4").tobytes()
    assert client.get(f"ltr:item:catalog:{live.version()}:d7") == expected
    notes = {v["version"]: v["notes"] for v in report["versions"] if v["model"] == "shop"}
    assert "version " + live.version() + " is live and complete and stays live" in notes["v2"][0]

    # Again: everything is intact, nothing is written or announced.
    code, report, stderr = restore(registry, redis_server.url)
    assert code == 0, stderr
    assert set(states(report).values()) == {
        ("intact", "none"),
        ("none", "intact"),
        ("none", "kept"),
    }
    assert report["announced"] == []
    client.close()


def test_restore_repairs_what_was_partly_lost(tmp_path: Path, redis_server: RedisServer) -> None:
    """Eviction: a row of the live set and one embedding gone, the pointer still there."""
    registry = tmp_path / "registry"
    client = redis.Redis.from_url(redis_server.url)
    users = user_version(tmp_path / "runs", "v1", CLUSTERS, ["US", "FR"])
    publish(users, registry, redis_url=redis_server.url)
    table = item_table(30, NAMES, seed=1)
    publish(shop_version(tmp_path / "runs", "v1", table), registry, redis_url=redis_server.url)
    client.delete(f"ltr:item:catalog:{table.version()}:d3")
    client.hdel("ltr:emb:m:v1", "FR")
    client.hset("ltr:emb:m:v1", "US", b"\x00" * 12)  # the right size, the wrong value

    code, report, stderr = restore(registry, redis_server.url, "--name", "shop", "--name", "m")
    assert code == 0, stderr
    assert states(report) == {
        ("m", "v1"): ("restored", "none"),
        ("shop", "v1"): ("none", "restored"),
    }
    assert client.hlen("ltr:emb:m:v1") == len(CLUSTERS)
    expected = np.ascontiguousarray(table.matrix[3], dtype="<f4").tobytes()
    assert client.get(f"ltr:item:catalog:{table.version()}:d3") == expected
    client.close()


def test_what_cannot_be_restored_is_an_error_the_rest_is_restored(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    registry, client = users_model(tmp_path, redis_server)
    shop_version(registry, "v1", item_table(30, NAMES, seed=1), snapshot=False)

    code, report, stderr = restore(registry, redis_server.url, "--name", "m", "--name", "gone")
    assert code == 2
    assert report["status"] == "error" and report["exit_code"] == 2
    assert report["errors"] == ["gone: no such deployed model in " + str(registry)]
    assert "error: gone: no such deployed model" in stderr
    assert client.hlen("ltr:emb:m:v1") == len(CLUSTERS)  # m restored all the same

    code, report, stderr = restore(registry, redis_server.url)
    assert code == 2
    assert states(report)[("shop", "v1")] == ("none", "error")
    assert "carries no snapshot to push" in report["errors"][0]
    assert "carries no snapshot to push" in stderr
    client.close()


def test_restore_refuses_a_bad_url_and_a_missing_registry(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    runner = CliRunner()
    args = ["redis", "restore", "--registry", str(tmp_path / "none")]
    bad = runner.invoke(app, [*args, "--redis-url", "redis://:hunter2@h:1/x"])
    assert bad.exit_code == 2 and "the database 'x' is not a number" in bad.stderr
    assert "hunter2" not in bad.output
    missing = runner.invoke(app, [*args, "--redis-url", redis_server.url])
    assert missing.exit_code == 2
    assert missing.stderr.strip() == f"error: {tmp_path / 'none'}: no such registry directory"
    (tmp_path / "empty").mkdir()
    args = ["redis", "restore", "--registry", str(tmp_path / "empty"), "--redis-url"]
    empty = runner.invoke(app, [*args, redis_server.url, "--json"])
    assert empty.exit_code == 2 and json.loads(empty.stdout)["status"] == "error"
    assert "no deployed model (no CURRENT) to restore" in empty.stderr


def test_the_text_report_names_each_version(tmp_path: Path, redis_server: RedisServer) -> None:
    registry = tmp_path / "registry"
    table = item_table(10, NAMES, seed=1)
    shop_version(registry, "v1", table)
    set_current(registry, "shop", "v1")
    args = ["redis", "restore", "--registry", str(registry), "--redis-url", redis_server.url]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"shop v1 (current): no user embeddings, item set catalog@{table.version()} restored",
        "announced: shop",
    ]


def test_a_set_left_live_by_a_rollback_without_redis_is_switched_back(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """A trial: v2 published with Redis made its set live; `ltr publish --rollback` without a
    Redis URL moved CURRENT back to v1, whose answers then scored with v2's item values, and
    restore kept v2's set live ("stays live") though no deployed version uses it."""
    registry = tmp_path / "registry"
    client = redis.Redis.from_url(redis_server.url)
    old, new = item_table(30, NAMES, seed=1), item_table(30, NAMES, seed=2)
    publish(shop_version(tmp_path / "runs", "v1", old), registry, redis_url=redis_server.url)
    publish(shop_version(tmp_path / "runs", "v2", new), registry, redis_url=redis_server.url)
    assert client.get("ltr:itemset:catalog") == new.version().encode()
    set_current(registry, "shop", "v1", rollback=True)  # as a rollback without a Redis URL

    code, report, stderr = restore(registry, redis_server.url)
    assert code == 0, stderr
    assert states(report) == {("shop", "v1"): ("none", "restored")}
    assert client.get("ltr:itemset:catalog") == old.version().encode()
    (notes,) = [v["notes"] for v in report["versions"]]
    assert f"version {new.version()} was live, which no deployed version" in notes[0]
    assert report["announced"] == ["shop"]
    client.close()


def test_an_embedding_key_of_the_wrong_type_is_replaced(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """A trial: `SET ltr:emb:personal:p1 junk`, and restore failed with WRONGTYPE, restoring
    nothing, though its help says it pushes what Redis does not hold intact."""
    registry, client = users_model(tmp_path, redis_server)
    client.set("ltr:emb:m:v1", "junk")

    code, report, stderr = restore(registry, redis_server.url)
    assert code == 0, stderr
    assert states(report) == {("m", "v1"): ("restored", "none")}
    (notes,) = [v["notes"] for v in report["versions"]]
    assert notes == ["ltr:emb:m:v1 held a string, not a hash: replaced"]
    assert client.hlen("ltr:emb:m:v1") == len(CLUSTERS)
    assert report["announced"] == ["m"]
    client.close()


def test_item_set_keys_of_the_wrong_type_are_replaced(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """The set's pointer, versions list, meta and items: each read by restore, each a
    WRONGTYPE error that left the set as it was."""
    registry = tmp_path / "registry"
    client = redis.Redis.from_url(redis_server.url)
    table = item_table(30, NAMES, seed=1)
    publish(shop_version(tmp_path / "runs", "v1", table), registry, redis_url=redis_server.url)
    live = table.version()
    item, meta = f"ltr:item:catalog:{live}:d3", f"ltr:itemset:catalog:{live}:meta"
    wrong_types = {
        "ltr:itemset:catalog": lambda key: client.hset(key, "a", "b"),
        "ltr:itemset:catalog:versions": lambda key: client.set(key, "x"),
        meta: lambda key: client.rpush(key, "x"),
        item: lambda key: client.sadd(key, "x"),
    }
    # The versions list (what expiry and `inspect` read) is only deleted: nothing else is lost.
    after = {"ltr:itemset:catalog:versions": "intact"}
    expected = np.ascontiguousarray(table.matrix[3], dtype="<f4").tobytes()
    for key, put in wrong_types.items():
        client.delete(key)
        put(key)
        code, report, stderr = restore(registry, redis_server.url)
        assert code == 0, (key, stderr)
        assert states(report) == {("shop", "v1"): ("none", after.get(key, "restored"))}, key
        (notes,) = [v["notes"] for v in report["versions"]]
        assert notes[0] == f"deleted 1 key(s) holding the wrong type: {key}", key
        assert client.get("ltr:itemset:catalog") == live.encode()
        assert client.type(meta) == b"string" and client.get(item) == expected, key
    code, report, stderr = restore(registry, redis_server.url)
    assert code == 0 and states(report) == {("shop", "v1"): ("none", "intact")}, stderr
    client.close()
