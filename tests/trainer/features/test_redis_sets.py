"""`ltr features push`: a whole version, verified, then an atomic pointer switch."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import redis
from typer.testing import CliRunner

from app.artifacts.manifest import FeatureSource
from tests.support import random_ensemble
from tests.support.redis_server import RedisServer, pipelines_die_at
from tests.support.sourced_model import item_table, publish_sourced
from trainer.cli import app
from trainer.features import set_writes
from trainer.features.redis_sets import PushError, push_item_set, read_item_set, switch_version

NAMES = ["x", "y"]


def test_push_writes_every_item_packed_in_set_order(redis_server: RedisServer) -> None:
    client = redis.Redis.from_url(redis_server.url)
    table = item_table(12_345, NAMES, seed=4)
    result = push_item_set(client, "ltr:", "s", table)
    assert result.items == 12_345 and result.previous is None and not result.unchanged
    assert client.get("ltr:itemset:s") == result.version.encode()
    raw = client.get(f"ltr:item:s:{result.version}:d77")
    assert raw == table.matrix[77].astype("<f4").tobytes()
    back = read_item_set(client, "ltr:", "s", result.version)
    order = np.argsort(back.ids)
    assert back.ids[order].tolist() == sorted(table.ids.tolist())
    again = push_item_set(client, "ltr:", "s", table)
    assert again.unchanged  # same content, same version: nothing rewritten


def test_an_interrupted_push_changes_nothing_served(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = redis.Redis.from_url(redis_server.url)
    live = push_item_set(client, "ltr:", "s", item_table(50, NAMES, seed=1)).version
    monkeypatch.setattr(set_writes, "BATCH", 10)
    monkeypatch.setattr(set_writes, "BATCHES_PER_ROUND_TRIP", 1)
    pipelines_die_at(monkeypatch, 3)
    with pytest.raises(redis.ConnectionError):
        push_item_set(client, "ltr:", "s", item_table(50, NAMES, seed=2))
    assert client.get("ltr:itemset:s") == live.encode()


def test_a_value_that_does_not_read_back_stops_the_switch(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = redis.Redis.from_url(redis_server.url)
    live = push_item_set(client, "ltr:", "s", item_table(20, NAMES, seed=1)).version
    real_mget = redis.client.Pipeline.mget

    def corrupting(self, keys, *args):  # type: ignore[no-untyped-def]
        client.set(keys[3], b"????????")  # another writer clobbers a key mid-push
        return real_mget(self, keys, *args)

    monkeypatch.setattr(redis.client.Pipeline, "mget", corrupting)
    with pytest.raises(PushError, match=r"did not read back as written; the live version"):
        push_item_set(client, "ltr:", "s", item_table(20, NAMES, seed=2))
    assert client.get("ltr:itemset:s") == live.encode()


def test_old_versions_expire_the_previous_one_is_kept(redis_server: RedisServer) -> None:
    client = redis.Redis.from_url(redis_server.url)
    v1 = push_item_set(client, "ltr:", "s", item_table(5, NAMES, seed=1)).version
    v2 = push_item_set(client, "ltr:", "s", item_table(5, NAMES, seed=2)).version
    assert client.ttl(f"ltr:item:s:{v1}:d0") == -1  # the previous version stays for rollback
    v3 = push_item_set(client, "ltr:", "s", item_table(5, NAMES, seed=3))
    assert v3.expired == [v1] and 0 < client.ttl(f"ltr:item:s:{v1}:d0") <= 86400
    assert client.ttl(f"ltr:item:s:{v2}:d0") == -1
    assert switch_version(client, "ltr:", "s", v2) == v3.version
    with pytest.raises(PushError, match="no complete version 'nope'"):
        switch_version(client, "ltr:", "s", "nope")


def test_a_rollback_expires_what_is_neither_live_nor_kept(redis_server: RedisServer) -> None:
    """Before: rolled back from C to A, the B pushed between them never expired."""
    client = redis.Redis.from_url(redis_server.url)
    a, b, c = (push_item_set(client, "ltr:", "s", item_table(5, NAMES, seed=k)) for k in (1, 2, 3))
    assert switch_version(client, "ltr:", "s", a.version) == c.version  # A revived, C kept
    assert client.ttl(f"ltr:item:s:{a.version}:d0") == -1
    assert client.ttl(f"ltr:item:s:{c.version}:d0") == -1
    assert 0 < client.ttl(f"ltr:item:s:{b.version}:d0") <= 86400
    assert 0 < client.ttl(f"ltr:itemset:s:{b.version}:meta") <= 86400
    # Listed with its expiry while a rollback can still reach it.
    shown = CliRunner().invoke(
        app, ["features", "inspect", "redis:s", "--redis-url", redis_server.url, "--json"]
    )
    expiry = {v["version"]: v["expires_in"] for v in json.loads(shown.stdout)["versions"]}
    assert expiry[a.version] is None and expiry[c.version] is None
    assert 0 < expiry[b.version] <= 86400


def test_inspect_of_a_version_that_is_not_there_is_an_error(redis_server: RedisServer) -> None:
    """Before: the set's table, no sample, exit 0."""
    client = redis.Redis.from_url(redis_server.url)
    live = push_item_set(client, "ltr:", "s", item_table(5, NAMES, seed=1)).version
    url = ["--redis-url", redis_server.url]
    shown = CliRunner().invoke(app, ["features", "inspect", "redis:s@vnope", *url])
    assert shown.exit_code == 2
    assert shown.stderr.strip() == f"error: item set 's' has no version 'vnope' (versions: {live})"


def test_diff_measures_a_change_to_infinity_and_counts_one_to_missing(tmp_path: Path) -> None:
    """Before: 1 -> inf and 3 -> missing were "2 changed, max |a - b| 0"."""
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    pq.write_table(pa.table({"doc_id": ["p", "q", "r"], "x": [1.0, 2.0, 3.0]}), a)
    pq.write_table(pa.table({"doc_id": ["p", "q", "r"], "x": [1.0, float("inf"), None]}), b)
    diff = CliRunner().invoke(app, ["features", "diff", str(a), str(b), "--json"])
    assert diff.exit_code == 1
    report = json.loads(diff.stdout)
    assert report["items_changed_sample"] == ["q", "r"]
    assert report["features_changed"] == [
        {"feature": "x", "items_changed": 2, "became_or_stopped_missing": 1,
         "max_abs_diff": "Infinity"}
    ]  # fmt: skip


def test_cli_push_inspect_diff(redis_server: RedisServer, tmp_path: Path) -> None:
    runner = CliRunner()
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    pq.write_table(pa.table({"doc_id": ["p", "q", "r"], "x": [1.0, 2.0, 3.0]}), a)
    pq.write_table(pa.table({"doc_id": ["q", "r", "s"], "x": [2.0, 3.5, 4.0]}), b)
    url = ["--redis-url", redis_server.url]
    pushed = runner.invoke(
        app, ["features", "push", "--items", str(a), "--set", "cat", *url, "--json"]
    )
    assert pushed.exit_code == 0, pushed.output
    summary = json.loads(pushed.stdout)
    assert summary["items"] == 3 and summary["features"] == 1 and summary["previous"] is None
    shown = runner.invoke(app, ["features", "inspect", "redis:cat", *url, "--json"])
    report = json.loads(shown.stdout)
    assert report["live"] == summary["version"] and report["versions"][0]["items"] == 3
    assert report["sample"][0] == {"id": "p", "features": {"x": 1.0}}
    diff = runner.invoke(app, ["features", "diff", "redis:cat", str(b), *url, "--json"])
    d = json.loads(diff.stdout)
    assert d["identical"] is False and d["items_only_in_a"]["sample"] == ["p"]
    assert d["items_only_in_b"]["sample"] == ["s"] and d["items_changed"] == 1
    assert d["items_changed_sample"] == ["r"]
    assert d["features_changed"] == [
        {"feature": "x", "items_changed": 1, "became_or_stopped_missing": 0, "max_abs_diff": 0.5}
    ]
    same = runner.invoke(app, ["features", "diff", str(a), "redis:cat", *url, "--json"])
    assert json.loads(same.stdout)["identical"] is True


def test_an_empty_item_table_is_refused_the_live_set_kept(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """It used to go live as a set of 0 items: every item of every request then missing."""
    runner = CliRunner()
    full, empty = tmp_path / "full.parquet", tmp_path / "empty.parquet"
    pq.write_table(pa.table({"doc_id": ["p", "q"], "x": [1.0, 2.0]}), full)
    pq.write_table(
        pa.table({"doc_id": pa.array([], pa.string()), "x": pa.array([], pa.float64())}), empty
    )
    url = ["--redis-url", redis_server.url]
    push = ["features", "push", "--set", "cat", *url, "--json", "--items"]
    live = json.loads(runner.invoke(app, [*push, str(full)]).stdout)["version"]
    refused = runner.invoke(app, [*push, str(empty)])
    assert refused.exit_code == 2
    assert refused.stderr.strip() == f"error: {empty}: no item rows"
    shown = runner.invoke(app, ["features", "inspect", "redis:cat", *url, "--json"])
    assert json.loads(shown.stdout)["live"] == live


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(
        app,
        [
            "features",
            "push",
            "--items",
            str(tmp_path / "x.parquet"),
            "--set",
            "c",
            "--redis-url",
            "redis://127.0.0.1:1",
        ],
    )
    assert result.exit_code == 2 and result.stderr.startswith("error: ")


def test_a_bare_set_name_is_pointed_to_its_redis_form(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["features", "inspect", "cat"])
    assert result.exit_code == 2
    assert "redis:cat" in result.stderr and result.stderr.count("\n") == 1
    missing = CliRunner().invoke(app, ["features", "inspect", "gone.parquet"])
    assert missing.exit_code == 2 and "redis:" not in missing.stderr


def test_pushing_a_models_snapshot_under_another_set_name_warns(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """Before: pushed as `other` in silence, a set the model never reads."""
    table = item_table(5, NAMES, seed=1)
    sources: dict[str, FeatureSource] = {name: "item" for name in NAMES}
    ensemble = random_ensemble(3, num_trees=2, depth=2)
    version = publish_sourced(tmp_path, ensemble, sources, table, feature_names=["c", *NAMES])
    args = ["features", "push", "--model", str(version), "--redis-url", redis_server.url]
    pushed = CliRunner().invoke(app, [*args, "--set", "other", "--json"])
    assert pushed.exit_code == 0, pushed.output
    warning = f"warning: {version} reads item set 'catalog'; this pushes its snapshot as 'other'"
    assert pushed.stderr.startswith(warning)
    assert json.loads(pushed.stdout)["warnings"][0].startswith(warning)
    same = CliRunner().invoke(app, [*args, "--set", "catalog"])
    assert same.exit_code == 0 and "warning" not in same.stderr
