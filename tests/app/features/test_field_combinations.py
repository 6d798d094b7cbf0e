"""Hashed field combinations: keys, buckets, the table's combination rows and the resolver."""

from __future__ import annotations

import asyncio
import json
import zlib

import numpy as np
import pytest

from app.artifacts.manifest import Manifest
from app.features.embedding_table import EmbeddingTable
from app.features.field_combinations import (
    bucket_of,
    combination_buckets,
    combination_count,
    combination_keys,
    combination_row_key,
    parse_combination_row_key,
)
from app.features.user_features import UserFeatureResolver
from app.settings import Settings
from tests.app.features.conftest import CLUSTERS, DIM, make_manifest, npy_bytes

BUCKETS = 1024
FIELDS = ["field:country=US", "field:country=FR", "field:price=pn1", "field:price=pn2"]
US_PN1 = "field:country=US&field:price=pn1"
FR_PN2 = "field:country=FR&field:price=pn2"
COMBO_BUCKETS = [bucket_of(US_PN1, BUCKETS), bucket_of(FR_PN2, BUCKETS)]
KEYS = [*CLUSTERS, *FIELDS, *map(combination_row_key, COMBO_BUCKETS)]
# Cluster rows i (0..4), field rows 100..400, combination rows 1000 and 2000.
VECTORS = np.repeat(
    np.array([0, 1, 2, 3, 4, 100, 200, 300, 400, 1000, 2000], np.float32)[:, None], DIM, axis=1
)


def combination_manifest(buckets: int = BUCKETS) -> Manifest:
    manifest = make_manifest()
    assert manifest.user_clusters is not None
    uc = manifest.user_clusters.model_copy(
        update={"field_embeddings": True, "combination_buckets": buckets}
    )
    return manifest.model_copy(update={"user_clusters": uc})


def combination_files() -> dict[str, bytes]:
    return {"clusters.json": json.dumps(KEYS).encode(), "embeddings.npy": npy_bytes(VECTORS)}


def test_keys_do_not_depend_on_the_order_of_the_fields() -> None:
    keys = ["field:country=US", "field:device=mobile", "field:age=a2"]
    got = combination_keys(keys, 3)
    assert got == [
        "field:age=a2&field:country=US",
        "field:age=a2&field:device=mobile",
        "field:country=US&field:device=mobile",
        "field:age=a2&field:country=US&field:device=mobile",
    ]
    assert combination_keys(keys[::-1], 3) == got
    assert combination_keys(keys, 2) == got[:3]
    assert combination_keys(keys[:1], 3) == []
    assert [combination_count(n, 3) for n in (1, 2, 3, 4)] == [0, 1, 4, 10]
    assert combination_count(4, 2) == 6


def test_buckets_are_crc32_and_stable() -> None:
    # The same bucket in every process and on every machine (no Python hash randomisation).
    assert bucket_of(US_PN1, BUCKETS) == zlib.crc32(US_PN1.encode()) % BUCKETS
    assert combination_buckets(FIELDS[::2], 3, BUCKETS) == [bucket_of(US_PN1, BUCKETS)]
    assert parse_combination_row_key(combination_row_key(17), BUCKETS) == 17
    for key in ("combo:", "combo:x", "combo:1024", "field:a=b", "US"):
        assert parse_combination_row_key(key, BUCKETS) is None


def test_table_adds_the_combination_rows() -> None:
    table = EmbeddingTable.from_files(combination_manifest(), combination_files())
    assert set(table.index) == set(CLUSTERS)
    assert table.combination_index == {COMBO_BUCKETS[0]: 9, COMBO_BUCKETS[1]: 10}
    # US_pn1 → cluster US (1), fields US (100) and pn1 (300), combination US&pn1 (1000).
    assert table.extra_rows("US_pn1") == [5, 7, 9]
    got = table.user_vector(table.vector(table.resolve("US_pn1")), "US_pn1")
    np.testing.assert_array_equal(got, np.full(DIM, 1401, np.float32))
    # US_pn2: its combination has no row and adds nothing; a coarser id has no combination.
    np.testing.assert_array_equal(
        table.user_vector(table.vector("US"), "US_pn2"), np.full(DIM, 1 + 100 + 400)
    )
    assert table.extra_rows("US") == [5]
    assert table.extra_rows("unknown") == []


def test_without_combination_buckets_combo_keys_are_cluster_ids() -> None:
    manifest = combination_manifest(buckets=0)
    table = EmbeddingTable.from_files(manifest, combination_files())
    assert table.combination_index == {}
    assert combination_row_key(COMBO_BUCKETS[0]) in table.index
    assert table.extra_rows("US_pn1") == [5, 7]


def test_combinations_need_field_embeddings() -> None:
    uc = make_manifest().user_clusters
    assert uc is not None
    with pytest.raises(ValueError, match="needs field_embeddings"):
        uc.model_validate({**uc.model_dump(), "combination_buckets": 8})


@pytest.mark.parametrize(
    ("profile", "cluster", "value"),
    [
        ({"country": "US", "price": 2}, "US", 1401),  # US_pn1 → US + US + pn1 + US&pn1
        ({"country": "FR", "price": 5}, "FR_pn2", 4 + 200 + 400 + 2000),
        ({"country": "FR", "price": 2}, "FR", 3 + 200 + 300),  # FR&pn1 has no row
    ],
)
def test_resolver_adds_the_combination_rows(
    profile: dict[str, object], cluster: str, value: int
) -> None:
    manifest = combination_manifest()

    async def run() -> tuple[np.ndarray | None, str | None]:
        resolver = UserFeatureResolver(Settings(redis_url=None), metrics=object())
        resolver.register_model(manifest, combination_files())
        await resolver.start()
        try:
            got = await resolver.resolve(manifest, {"id": "u1", "profile": profile})
        finally:
            await resolver.close()
        assert not got.degraded
        return got.vector, got.cluster

    vector, got_cluster = asyncio.run(run())
    assert got_cluster == cluster
    assert vector is not None
    np.testing.assert_array_equal(vector, np.full(DIM, value, np.float32))


def test_extra_rows_are_summed_once_per_id_and_the_cache_stays_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("app.features.embedding_table.EXTRA_VECTORS_CACHED", 2)
    table = EmbeddingTable.from_files(combination_manifest(), combination_files())
    first = table.user_vector(table.vector("US"), "US_pn1")
    # A Redis vector for the same id gets the same cached rows added.
    redis_vector = np.full(DIM, 0.5, np.float32)
    np.testing.assert_array_equal(table.user_vector(redis_vector, "US_pn1"), first - 1 + 0.5)
    for cid in ("FR_pn2", "US_pn2", "FR_pn1"):
        table.user_vector(table.vector("unknown"), cid)
    assert len(table._extra_vectors) <= 2
    np.testing.assert_array_equal(table.user_vector(table.vector("US"), "US_pn1"), first)
