from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import numpy as np
import pytest
import redis

from app.artifacts.manifest import (
    BucketedField,
    ClusterScheme,
    Manifest,
    MissingValueRule,
    UserClusters,
)
from tests.support.redis_server import RedisServer, redis_binary
from trainer.redis_publish import announce, embeddings_key, push_embeddings


@pytest.fixture
def server() -> Iterator[RedisServer]:
    srv = RedisServer(redis_binary()).start()
    yield srv
    srv.stop()


def _manifest(dim: int = 2) -> Manifest:
    scheme = ClusterScheme(fields=[BucketedField(name="country", kind="categorical")])
    return Manifest(
        name="m",
        version="v1",
        kind="lambdamart",
        created_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
        feature_names=["a", "e0", "e1"],
        missing_value=MissingValueRule(handled_by="tree_default_direction"),
        user_clusters=UserClusters(scheme=scheme, embedding_dim=dim),
    )


def test_push_replaces_the_whole_hash(server: RedisServer) -> None:
    manifest = _manifest()
    key = embeddings_key("p:", "m", "v1")
    with redis.Redis.from_url(server.url) as client:
        client.hset(key, "stale", b"x")
        push_embeddings(server.url, "p:", manifest, ["unknown", "US"], np.eye(2, dtype=np.float64))
        stored = client.hgetall(key)
        assert client.keys("p:emb:m:v1:tmp:*") == []
    assert set(stored) == {b"unknown", b"US"}
    assert stored[b"US"] == np.array([0.0, 1.0], "<f4").tobytes()
    assert len(stored[b"unknown"]) == 2 * 4


@pytest.mark.parametrize(
    ("clusters", "embeddings", "message"),
    [
        (["a", "b"], np.zeros((3, 2)), r"shape \(3, 2\), expected \(2, 2\)"),
        (["a", "b"], np.zeros((2, 3)), r"shape \(2, 3\), expected \(2, 2\)"),
        (["a", "a"], np.zeros((2, 2)), "unique"),
        (["a", "b"], np.full((2, 2), np.inf), "NaN or infinite"),
    ],
)
def test_push_refuses_bad_input(
    server: RedisServer, clusters: list[str], embeddings: np.ndarray, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        push_embeddings(server.url, "p:", _manifest(), clusters, embeddings)


def test_push_refuses_a_model_without_clusters(server: RedisServer) -> None:
    plain = _manifest().model_copy(update={"user_clusters": None})
    with pytest.raises(ValueError, match="no user clusters"):
        push_embeddings(server.url, "p:", plain, ["a"], np.zeros((1, 2)))


def test_announce_publishes_json(server: RedisServer) -> None:
    with redis.Redis.from_url(server.url) as client, client.pubsub() as pubsub:
        pubsub.subscribe("p:events")
        assert pubsub.get_message(timeout=1.0)["type"] == "subscribe"
        assert announce(server.url, "p:", "m", "v2") == 1
        message = pubsub.get_message(timeout=1.0)
    assert message is not None
    assert message["data"] == b'{"model": "m", "version": "v2"}'
