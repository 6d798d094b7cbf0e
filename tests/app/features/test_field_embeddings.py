"""Per-field rows summed with the cluster's row: the table, and the resolver with and without
Redis."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import pytest

from app.artifacts.manifest import Manifest
from app.features.embedding_table import EmbeddingTable, field_key, field_keys
from app.features.user_features import UserFeatureResolver, UserFeatures
from app.settings import Settings
from tests.app.features.conftest import CLUSTERS, DIM, make_files, make_manifest, npy_bytes
from tests.support.redis_server import RedisServer
from trainer.redis_publish import push_embeddings

FIELDS = ["field:country=US", "field:country=FR", "field:price=pn1", "field:price=pn2"]
KEYS = [*CLUSTERS, *FIELDS]
# Cluster rows are all i (0..4); field rows 100, 200, 300, 400: sums show which rows were added.
VECTORS = np.vstack(
    [
        np.repeat(np.arange(len(CLUSTERS), dtype=np.float32)[:, None], DIM, axis=1),
        np.repeat(np.array([100, 200, 300, 400], np.float32)[:, None], DIM, axis=1),
    ]
)


def field_manifest(version: str = "v1") -> Manifest:
    manifest = make_manifest(version)
    assert manifest.user_clusters is not None
    uc = manifest.user_clusters.model_copy(update={"field_embeddings": True})
    return manifest.model_copy(update={"user_clusters": uc})


def field_files() -> dict[str, bytes]:
    return {"clusters.json": json.dumps(KEYS).encode(), "embeddings.npy": npy_bytes(VECTORS)}


def test_field_keys_follow_the_scheme_order() -> None:
    uc = make_manifest().user_clusters
    assert uc is not None
    assert field_keys(uc.scheme, "US_pn1") == ["field:country=US", "field:price=pn1"]
    assert field_keys(uc.scheme, "US") == ["field:country=US"]
    assert field_keys(uc.scheme, "unknown") == []
    assert field_key("age", "a3") == "field:age=a3"


def test_table_splits_cluster_and_field_rows() -> None:
    table = EmbeddingTable.from_files(field_manifest(), field_files())
    assert set(table.index) == set(CLUSTERS)
    assert table.field_index == {k: len(CLUSTERS) + i for i, k in enumerate(FIELDS)}
    # US_pn1 resolves to US (row 1) and keeps both of its fields: 1 + 100 + 300.
    cluster = table.resolve("US_pn1")
    assert cluster == "US"
    got = table.user_vector(table.vector(cluster), "US_pn1")
    np.testing.assert_array_equal(got, np.full(DIM, 401, np.float32))
    assert got.dtype == np.float32 and not got.flags.writeable
    # A token without a row adds nothing; the unknown id adds no field.
    got = table.user_vector(table.vector("US_pn0"), "US_pn0")
    np.testing.assert_array_equal(got, np.full(DIM, 2 + 100, np.float32))
    np.testing.assert_array_equal(table.user_vector(table.vector("unknown"), "unknown"), [0, 0, 0])


def test_without_the_flag_field_like_ids_are_plain_clusters() -> None:
    table = EmbeddingTable.from_files(make_manifest(), field_files())
    assert table.field_index == {}
    assert "field:country=US" in table.index
    np.testing.assert_array_equal(table.user_vector(table.vector("US"), "US_pn1"), [1, 1, 1])
    # Old artifacts (clusters only) are read as before.
    plain = EmbeddingTable.from_files(make_manifest(), make_files())
    np.testing.assert_array_equal(plain.user_vector(plain.vector("FR"), "FR_pn2"), [3, 3, 3])


def _resolve(settings: Settings, user: Any) -> UserFeatures:
    manifest = field_manifest()

    async def scenario() -> UserFeatures:
        resolver = UserFeatureResolver(settings, metrics=object())
        resolver.register_model(manifest, field_files())
        await resolver.start()
        try:
            return await resolver.resolve(manifest, user)
        finally:
            await resolver.close()

    return asyncio.run(scenario())


@pytest.mark.parametrize(
    ("user", "cluster", "value"),
    [
        ({"profile": {"country": "FR", "price": 7}}, "FR_pn2", 4 + 200 + 400),
        ({"profile": {"country": "FR", "price": 2}}, "FR", 3 + 200 + 300),
        ({"profile": {"country": "DE", "price": 2}}, "unknown", 0 + 300),
        (None, "unknown", 0),
    ],
)
def test_resolver_adds_the_field_rows_in_process(user: Any, cluster: str, value: float) -> None:
    got = _resolve(Settings(redis_url=None), user)
    assert got.cluster == cluster and not got.degraded
    assert got.vector is not None
    np.testing.assert_array_equal(got.vector, np.full(DIM, value, np.float32))


def test_resolver_adds_the_field_rows_to_the_redis_vector(redis_server: RedisServer) -> None:
    manifest = field_manifest()
    remote = VECTORS + 1000  # Redis holds other values than the artifact: the sum shows both
    push_embeddings(redis_server.url, "t:", manifest, KEYS, remote)
    settings = Settings(redis_url=redis_server.url, redis_prefix="t:", redis_deadline_ms=200.0)
    got = _resolve(settings, {"id": "u1", "profile": {"country": "FR", "price": 2}})
    assert (got.cluster, got.degraded) == ("FR", False)
    assert got.vector is not None
    np.testing.assert_array_equal(got.vector, np.full(DIM, 1003 + 200 + 300, np.float32))
