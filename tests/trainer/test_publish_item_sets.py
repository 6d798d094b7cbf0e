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
    assert result.stdout == "published m v1 (previous: None)\n"
    label = f"catalog@{table.version()}"
    assert result.stderr == (
        f"note: item set {label} was not pushed to Redis (no --redis-url): services use the "
        f"model's in-process snapshot; push it with `ltr features push --set catalog --model "
        f"{registry / 'm' / 'v1'}` or publish with --redis-url\n"
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
