"""Shared pieces for the user-cluster tests: a small scheme, its artifact files, a Redis."""

from __future__ import annotations

import datetime as dt
import io
import json

import numpy as np
import pytest

from app.artifacts.manifest import (
    BucketedField,
    ClusterScheme,
    Manifest,
    MissingValueRule,
    UserClusters,
)

DIM = 3
# Profile {"country": "US", "price": 2} → "US_pn1"; the table lacks it, so it resolves to "US".
CLUSTERS = ["unknown", "US", "US_pn0", "FR", "FR_pn2"]


def make_manifest(version: str = "v1", name: str = "m", dim: int = DIM) -> Manifest:
    scheme = ClusterScheme(
        fields=[
            BucketedField(name="country", kind="categorical", values=["US", "FR"]),
            BucketedField(name="price", kind="numeric", prefix="pn", edges=[1.0, 3.0]),
        ]
    )
    return Manifest(
        name=name,
        version=version,
        kind="lambdamart",
        created_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
        feature_names=["bm25", *[f"emb{i}" for i in range(dim)]],
        missing_value=MissingValueRule(handled_by="tree_default_direction"),
        user_clusters=UserClusters(scheme=scheme, embedding_dim=dim),
    )


def table_vectors(n: int = len(CLUSTERS), dim: int = DIM) -> np.ndarray:
    """Row i is all i: easy to tell which cluster a vector came from."""
    return np.repeat(np.arange(n, dtype=np.float32)[:, None], dim, axis=1)


def npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def make_files(
    clusters: list[str] | None = None, vectors: np.ndarray | None = None
) -> dict[str, bytes]:
    clusters = CLUSTERS if clusters is None else clusters
    vectors = table_vectors(len(clusters)) if vectors is None else vectors
    return {"clusters.json": json.dumps(clusters).encode(), "embeddings.npy": npy_bytes(vectors)}


@pytest.fixture
def manifest() -> Manifest:
    return make_manifest()
