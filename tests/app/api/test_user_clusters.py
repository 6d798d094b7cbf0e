"""A model with user-cluster embeddings appended to the features, without Redis: the vector
comes from the artifact's in-process copy."""

from __future__ import annotations

import datetime as dt
import io
from pathlib import Path

import numpy as np
import orjson

from app.artifacts.manifest import (
    BucketedField,
    ClusterScheme,
    Manifest,
    MissingValueRule,
    UserClusters,
)
from app.artifacts.store import set_current, write_version
from app.scoring.reference import predict
from tests.app.api.conftest import NF, ClientFactory
from tests.support import random_ensemble

DIM = 3
CLUSTERS = ["unknown", "US", "US_pn1", "FR"]
VECTORS = np.array([[0, 0, 0], [1, 1, 1], [2, -2, 2], [-3, 3, -3]], dtype=np.float32)


def publish_clustered(registry: Path):
    ensemble = random_ensemble(NF + DIM, num_trees=30, depth=4, seed=5)
    scheme = ClusterScheme(
        fields=[
            BucketedField(name="country", kind="categorical", values=["US", "FR"]),
            BucketedField(name="price", kind="numeric", prefix="pn", edges=[1.0, 3.0]),
        ]
    )
    manifest = Manifest(
        name="uc",
        version="v1",
        kind="lambdamart",
        created_at=dt.datetime.now(dt.UTC),
        feature_names=[f"f{i}" for i in range(NF)] + [f"emb{i}" for i in range(DIM)],
        missing_value=MissingValueRule(handled_by="tree_default_direction"),
        user_clusters=UserClusters(scheme=scheme, embedding_dim=DIM),
    )
    buf = io.BytesIO()
    np.save(buf, VECTORS, allow_pickle=False)
    files = {
        "model.json": ensemble.to_json_bytes(),
        "clusters.json": orjson.dumps(CLUSTERS),
        "embeddings.npy": buf.getvalue(),
    }
    write_version(registry, manifest, files)
    set_current(registry, "uc", "v1")
    return ensemble


def test_the_cluster_vector_is_appended_to_every_row(
    make_client: ClientFactory, registry_dir: Path
) -> None:
    ensemble = publish_clustered(registry_dir)
    rows = np.random.default_rng(0).normal(0, 1, (6, NF)).round(2).astype(np.float32)
    cands = [{"id": i, "features": row.tolist()} for i, row in enumerate(rows)]
    cases = [
        ({"country": "US", "price": 2}, "US_pn1", 2),
        ({"country": "FR", "price": 9}, "FR", 3),  # FR_pn2 is not in the table: coarser id
        (None, "unknown", 0),
    ]
    with make_client() as client:
        info = {m["name"]: m for m in client.get("/models").json()["models"]}["uc"]
        assert info["feature_names"] == [f"f{i}" for i in range(NF)]  # what clients send
        for profile, cluster, row in cases:
            body = {"model": "uc", "candidates": cands, "explain": True}
            if profile is not None:
                body["user"] = {"profile": profile}
            resp = client.post("/rerank", json=body).json()
            full = np.hstack([rows, np.broadcast_to(VECTORS[row], (len(rows), DIM))])
            offline = predict(ensemble, full)
            assert resp["user_cluster"] == cluster
            assert resp["degraded"] is False
            got = {r["id"]: r["score"] for r in resp["results"]}
            np.testing.assert_allclose([got[i] for i in range(len(rows))], offline, rtol=1e-6)
        # The embedding columns are not the client's to send.
        bad = {"model": "uc", "candidates": [{"id": 0, "features": {"emb0": 1.0}}]}
        assert client.post("/rerank", json=bad).status_code == 422
