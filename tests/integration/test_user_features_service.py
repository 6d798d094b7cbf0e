"""Models with user features, end to end over real sockets: trained with `ltr train`, published
with `ltr publish --redis-url` (the table reaches Redis), served by uvicorn; each request's
scores equal what `ltr evaluate --user-profiles` computes offline for that user."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pytest
import redis
from typer.testing import CliRunner

from app.artifacts.store import load_version
from app.features.embedding_table import EmbeddingTable
from tests.support.redis_server import RedisServer
from tests.support.uvicorn_server import uvicorn_server
from trainer.cli import app
from trainer.data.loader import load_dataset
from trainer.dataset_scoring import score_dataset
from trainer.dnn.user_clusters import user_vectors
from trainer.dnn.user_profiles import read_profiles


def invoke(*args: object) -> str:
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.stderr
    return result.stdout


@pytest.mark.slow
def test_served_scores_equal_offline_scores_for_each_user(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    sim = tmp_path / "sim"
    invoke("simulate", "--out", sim, "--rows", "3000", "--users", "120", "--seed", "5")
    data = ["--train", sim / "train.parquet", "--valid", sim / "vali.parquet", "--threads", "1"]
    users = ["--user-profiles", sim / "users.parquet"]
    net, trees = tmp_path / "src" / "net" / "v1", tmp_path / "src" / "trees" / "v1"
    invoke(
        "train", "--engine", "dnn", *data, "--out", net, "--name", "net", *users,
        "--cluster-config", sim / "cluster_scheme.toml", "--embedding-dim", "4",
        "--min-cluster-count", "5", "--hidden", "16", "--epochs", "2",
    )  # fmt: skip
    invoke(
        "train", "--engine", "lightgbm", *data, "--out", trees, "--name", "trees", *users,
        "--user-embeddings-from", net, "--num-trees", "15",
    )  # fmt: skip
    registry = tmp_path / "registry"
    for version in (net, trees):
        invoke(
            "publish", "--model", version, "--registry", registry, "--redis-url", redis_server.url
        )
    keys = load_version(net).files["clusters.json"].count(b'"')  # 2 quotes per key
    client = redis.Redis.from_url(redis_server.url)
    assert client.hlen("ltr:emb:trees:v1") == client.hlen("ltr:emb:net:v1") == keys // 2

    test = load_dataset(sim / "test.parquet")
    profiles = read_profiles(sim / "users.parquet")
    assert test.user_ids is not None
    # A generous deadline: the test checks the values, not the latency (the machine is shared).
    env = {
        "LTR_REGISTRY": str(registry),
        "LTR_REDIS_URL": redis_server.url,
        "LTR_REDIS_DEADLINE_MS": "2000",
        # Scores are compared: a loaded machine must not shed a request past the 100 ms budget.
        "LTR_REQUEST_BUDGET_MS": "10000",
    }
    with uvicorn_server(env) as server, httpx.Client(base_url=server.url) as http:
        fresh = 0
        for name in ("net", "trees"):
            artifact = load_version(registry / name / "v1")
            table = EmbeddingTable.from_files(artifact.manifest, artifact.files)
            feature_count = len(artifact.manifest.request_feature_names)
            for q in range(5):
                lo, hi = test.group_offsets[q], test.group_offsets[q + 1]
                user = str(test.user_ids[q])
                profile = {k: v for k, v in profiles[user].items() if v is not None}
                body = {
                    "model": name,
                    "user": {"id": user, "profile": profile},
                    "candidates": [
                        {"id": str(i), "features": test.features[i, :feature_count].tolist()}
                        for i in range(lo, hi)
                    ],
                }
                resp = http.post("/rerank", json=body)
                assert resp.status_code == 200, resp.text
                got = resp.json()
                # Redis trouble on a loaded machine falls back to the version's own copy of the
                # same table: the scores must be equal either way.
                fresh += not got["degraded"]
                served = {r["id"]: r["score"] for r in got["results"]}
                one = test.subset_queries(np.array([q]))
                expected = score_dataset(artifact, one, user_vectors(table, profiles, [user]))
                for i, score in enumerate(expected):
                    assert served[str(lo + i)] == pytest.approx(float(score), rel=1e-5, abs=1e-5)
        assert fresh > 0, "every request fell back: the Redis path was never exercised"
