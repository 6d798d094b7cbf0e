from __future__ import annotations

import json
import re

import numpy as np
import pytest

from app.artifacts.manifest import Manifest
from app.features.embedding_table import EmbeddingTable
from tests.app.features.conftest import CLUSTERS, DIM, make_files, npy_bytes, table_vectors


def test_lookup_and_fallback_chain(manifest: Manifest) -> None:
    table = EmbeddingTable.from_files(manifest, make_files())
    assert table.dim == DIM and table.unknown == "unknown"
    assert table.resolve("US_pn0") == "US_pn0"
    assert table.resolve("US_pn1") == "US"
    assert table.resolve("DE_pn1") == "unknown"
    np.testing.assert_array_equal(table.vector("FR"), [3.0, 3.0, 3.0])
    np.testing.assert_array_equal(table.vector("nowhere"), [0.0, 0.0, 0.0])
    assert table.vector("US").dtype == np.float32
    with pytest.raises(ValueError):
        table.vectors[0, 0] = 1.0  # shared across requests: read-only


def test_big_endian_float32_is_accepted(manifest: Manifest) -> None:
    files = make_files(vectors=table_vectors().astype(">f4"))
    table = EmbeddingTable.from_files(manifest, files)
    np.testing.assert_array_equal(table.vector("FR_pn2"), [4.0, 4.0, 4.0])
    assert table.vectors.dtype == np.dtype(np.float32)


def _object_array() -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    return buf.getvalue()


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"embeddings.npy": npy_bytes(table_vectors())}, "clusters.json: missing"),
        ({"clusters.json": json.dumps(CLUSTERS).encode()}, "embeddings.npy: missing"),
        (make_files() | {"clusters.json": b"[not json"}, "not valid JSON"),
        (make_files() | {"clusters.json": b'{"a": 1}'}, "JSON list of non-empty strings"),
        (make_files() | {"clusters.json": b'["unknown", 3]'}, "JSON list of non-empty strings"),
        (make_files() | {"clusters.json": b'["unknown", "US", "US"]'}, "unique"),
        (make_files() | {"embeddings.npy": b"garbage bytes"}, "not a readable .npy"),
        (make_files() | {"embeddings.npy": npy_bytes(table_vectors())[:-5]}, "not a readable"),
        (make_files() | {"embeddings.npy": _object_array()}, "not a readable .npy"),
        (make_files(vectors=table_vectors().astype(np.float64)), "expected float32"),
        (make_files(vectors=table_vectors().astype(np.int32)), "expected float32"),
        (make_files(vectors=np.zeros(len(CLUSTERS) * DIM, np.float32)), "1-D array"),
        (make_files(vectors=table_vectors(len(CLUSTERS) + 1)), "shape (6, 3), expected (5, 3)"),
        (make_files(vectors=table_vectors(dim=DIM + 1)), "shape (5, 4), expected (5, 3)"),
        (
            make_files(vectors=np.full((len(CLUSTERS), DIM), np.nan, np.float32)),
            "NaN or infinite",
        ),
        (make_files(clusters=["US", "FR"]), "no row for the unknown cluster 'unknown'"),
    ],
)
def test_bad_tables_are_refused(manifest: Manifest, files: dict[str, bytes], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        EmbeddingTable.from_files(manifest, files)


def test_model_without_clusters_is_refused(manifest: Manifest) -> None:
    plain = manifest.model_copy(update={"user_clusters": None})
    with pytest.raises(ValueError, match="has no user clusters"):
        EmbeddingTable.from_files(plain, make_files())
