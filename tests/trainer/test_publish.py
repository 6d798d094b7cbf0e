from __future__ import annotations

import datetime as dt
import io
import json
from pathlib import Path

import numpy as np
import pytest
import redis

from app.artifacts.manifest import (
    BucketedField,
    ClusterScheme,
    Manifest,
    MissingValueRule,
    UserClusters,
    new_version_id,
)
from app.artifacts.store import ArtifactError, list_versions, read_current, write_version_dir
from app.artifacts.tree_dump import TreeEnsemble
from tests.support import stump
from tests.support.redis_server import RedisServer
from trainer.publish import publish, rollback

SCHEME = ClusterScheme(fields=[BucketedField(name="country", kind="categorical")])


def make_version(root: Path, leaf: float = 1.0, clusters: bool = False) -> Path:
    version = new_version_id()
    names = ["a", "b"] + (["u0", "u1"] if clusters else [])
    tree = stump(leaf)
    files = {"model.json": TreeEnsemble(len(names), [tree]).to_json_bytes()}
    uc = None
    if clusters:
        uc = UserClusters(scheme=SCHEME, embedding_dim=2)
        buf = io.BytesIO()
        np.save(buf, np.array([[0.0, 0.0], [1.0, 2.0]], dtype=np.float32))
        files |= {"clusters.json": b'["unknown", "US"]', "embeddings.npy": buf.getvalue()}
    manifest = Manifest(
        name="m",
        version=version,
        kind="lambdamart",
        created_at=dt.datetime.now(dt.UTC),
        feature_names=names,
        missing_value=MissingValueRule(handled_by="tree_default_direction"),
        user_clusters=uc,
    )
    return write_version_dir(root / version, manifest, files)


def test_publish_installs_and_moves_current(tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    v1, v2 = make_version(tmp_path / "runs"), make_version(tmp_path / "runs", 2.0)
    first = publish(v1, registry)
    assert (first.previous, read_current(registry, "m")) == (None, v1.name)
    second = publish(v2, registry)
    assert (second.previous, read_current(registry, "m")) == (v1.name, v2.name)
    assert list_versions(registry, "m") == [v1.name, v2.name]
    assert publish(v2, registry).version == v2.name  # publishing twice is harmless


def test_keep_prunes_oldest_but_never_current_or_previous(tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    runs = [make_version(tmp_path / "runs", float(i)) for i in range(4)]
    for run in runs:
        result = publish(run, registry, keep=1)
    assert list_versions(registry, "m") == [runs[2].name, runs[3].name]
    assert runs[1].name in result.removed


def test_rollback_returns_to_the_previous_version(tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    v1, v2 = make_version(tmp_path / "runs"), make_version(tmp_path / "runs", 2.0)
    publish(v1, registry)
    with pytest.raises(ArtifactError, match="no version before"):
        rollback(registry, "m")
    publish(v2, registry)
    assert rollback(registry, "m") == (v2.name, v1.name)
    assert read_current(registry, "m") == v1.name


def test_a_corrupt_source_is_refused_and_nothing_changes(tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    v1, v2 = make_version(tmp_path / "runs"), make_version(tmp_path / "runs", 2.0)
    publish(v1, registry)
    (v2 / "model.json").write_bytes(b"{}")
    with pytest.raises(ArtifactError, match="sha256"):
        publish(v2, registry)
    assert read_current(registry, "m") == v1.name
    assert list_versions(registry, "m") == [v1.name]


def test_embeddings_reach_redis_and_the_event_is_announced(
    tmp_path: Path,
    redis_server: RedisServer,
) -> None:
    client = redis.Redis.from_url(redis_server.url)
    pubsub = client.pubsub()
    pubsub.subscribe("ltr:events")
    assert pubsub.get_message(timeout=1)["type"] == "subscribe"
    v1 = make_version(tmp_path / "runs", clusters=True)
    result = publish(v1, tmp_path / "registry", redis_url=redis_server.url)
    assert result.redis_pushed
    raw = client.hget(f"ltr:emb:m:{v1.name}", "US")
    np.testing.assert_array_equal(np.frombuffer(raw, "<f4"), [1.0, 2.0])
    message = pubsub.get_message(timeout=2)
    assert json.loads(message["data"]) == {"model": "m", "version": v1.name}
    client.close()


def test_redis_down_does_not_stop_a_deploy(tmp_path: Path) -> None:
    v1 = make_version(tmp_path / "runs", clusters=True)
    result = publish(v1, tmp_path / "registry", redis_url="redis://127.0.0.1:1/0")
    assert not result.redis_pushed
    assert read_current(tmp_path / "registry", "m") == v1.name
    # The operator hears of it in --json too (it went to the log alone, "warnings": []).
    (warning,) = result.warnings
    assert warning.startswith("warning: could not push the user embeddings to Redis (")
    assert "embedding_missing_in_redis" in warning


def test_a_rollback_pushes_back_embeddings_redis_lost(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    registry = tmp_path / "registry"
    v1 = make_version(tmp_path / "runs", clusters=True)
    publish(v1, registry, redis_url=redis_server.url)
    v2 = make_version(tmp_path / "runs", leaf=2.0, clusters=True)
    publish(v2, registry, redis_url=redis_server.url)
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()  # a restart without persistence
    assert rollback(registry, "m", redis_url=redis_server.url) == (v2.name, v1.name)
    raw = client.hget(f"ltr:emb:m:{v1.name}", "US")
    np.testing.assert_array_equal(np.frombuffer(raw, "<f4"), [1.0, 2.0])
    client.close()


@pytest.mark.parametrize(
    "url, words",
    [
        ("notaurl", "expected redis://, rediss:// or unix://"),
        ("http://localhost:6379/0", "expected redis://, rediss:// or unix://"),
        ("redis://localhost:6379/abc", "the database 'abc' is not a number"),
    ],
)
def test_a_bad_redis_url_is_refused_before_anything_moves(
    tmp_path: Path, url: str, words: str
) -> None:
    from typer.testing import CliRunner

    from trainer.cli import app

    v1 = make_version(tmp_path / "runs", clusters=True)
    registry = tmp_path / "registry"
    args = ["publish", "--model", str(v1), "--registry", str(registry), "--redis-url", url]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert words in result.output
    assert read_current(registry, "m") is None
