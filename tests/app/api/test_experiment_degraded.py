"""An experiment's candidate reads its own embeddings key in Redis: a fault there is in the
answer's `degraded` and `reasons`, as the control's is. A trial: with the candidate's key
deleted, an A/B answer from the candidate said degraded false with reasons [] (the server log
said it was served from the model's own copy, degraded)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis

from app.artifacts.manifest import Manifest
from app.artifacts.store import write_version
from app.experiments.assignment import assign
from app.experiments.spec import CANDIDATE, CONTROL, ExperimentSpec
from app.registry.experiments import write_active
from tests.app.api.conftest import NF, ClientFactory
from tests.app.api.test_user_clusters import CLUSTERS, DIM, VECTORS, publish_clustered
from tests.support import random_ensemble
from tests.support.experiments import interleave_spec
from tests.support.redis_server import RedisServer
from trainer.redis_publish import push_embeddings

MISSING = "embedding_missing_in_redis"


def candidate_version(registry: Path) -> None:
    """`uc/v2`: v1's clusters and table (tests.app.api.test_user_clusters), other trees."""
    v1 = registry / "uc" / "v1"
    control = Manifest.model_validate_json((v1 / "manifest.json").read_bytes())
    ensemble = random_ensemble(NF + DIM, num_trees=30, depth=4, seed=6)
    files = {name: (v1 / name).read_bytes() for name in ("clusters.json", "embeddings.npy")}
    files["model.json"] = ensemble.to_json_bytes()
    write_version(registry, control.model_copy(update={"version": "v2", "files": {}}), files)


def experiment(registry: Path, mode: str) -> ExperimentSpec:
    spec = interleave_spec(name=f"e-{mode}", model="uc", mode=mode)
    write_active(registry, spec)
    return spec


def user_in(spec: ExperimentSpec, arm: int) -> str:
    return next(u for i in range(100) if assign(spec, u := f"user{i}", "r") == arm)


def push(url: str, registry: Path, version: str) -> None:
    manifest = Manifest.model_validate_json(
        (registry / "uc" / version / "manifest.json").read_bytes()
    )
    assert manifest.user_clusters is not None
    push_embeddings(url, "ltr:", manifest, CLUSTERS, VECTORS)


def rerank(client: Any, user: str) -> dict[str, Any]:
    rows = np.random.default_rng(0).normal(0, 1, (6, NF)).round(2).tolist()
    body = {
        "model": "uc",
        "candidates": [{"id": i, "features": row} for i, row in enumerate(rows)],
        "user": {"id": user, "profile": {"country": "US"}},
    }
    resp = client.post("/rerank", json=body)
    assert resp.status_code == 200, resp.text
    out: dict[str, Any] = resp.json()
    return out


@pytest.fixture
def clustered(registry_dir: Path) -> Path:
    publish_clustered(registry_dir)
    candidate_version(registry_dir)
    return registry_dir


def test_ab_answers_carry_the_served_arms_redis_faults(
    make_client: ClientFactory, clustered: Path, redis_server: RedisServer
) -> None:
    spec = experiment(clustered, "ab")
    push(redis_server.url, clustered, "v1")  # the candidate's key is missing
    on_candidate, on_control = user_in(spec, CANDIDATE), user_in(spec, CONTROL)
    with make_client(redis_url=redis_server.url, redis_deadline_ms=2000) as client:
        served = rerank(client, on_candidate)
        assert served["model"]["version"] == "v2"
        assert (served["degraded"], served["reasons"]) == (True, [MISSING])
        served = rerank(client, on_control)
        assert served["model"]["version"] == "v1"
        assert (served["degraded"], served["reasons"]) == (False, [])
    push(redis_server.url, clustered, "v2")
    redis.Redis.from_url(redis_server.url).delete("ltr:emb:uc:v1")  # now the control's
    with make_client(redis_url=redis_server.url, redis_deadline_ms=2000) as client:
        served = rerank(client, on_candidate)
        assert (served["degraded"], served["reasons"]) == (False, [])
        served = rerank(client, on_control)
        assert (served["degraded"], served["reasons"]) == (True, [MISSING])


def test_interleaved_answers_carry_both_versions_redis_faults(
    make_client: ClientFactory, clustered: Path, redis_server: RedisServer
) -> None:
    experiment(clustered, "interleave")
    push(redis_server.url, clustered, "v1")
    with make_client(redis_url=redis_server.url, redis_deadline_ms=2000) as client:
        served = rerank(client, "u1")
        assert (served["degraded"], served["reasons"]) == (True, [MISSING])
    redis.Redis.from_url(redis_server.url).delete("ltr:emb:uc:v1")  # both missing: one reason
    with make_client(redis_url=redis_server.url, redis_deadline_ms=2000) as client:
        served = rerank(client, "u1")
        assert (served["degraded"], served["reasons"]) == (True, [MISSING])
    push(redis_server.url, clustered, "v1")
    push(redis_server.url, clustered, "v2")
    with make_client(redis_url=redis_server.url, redis_deadline_ms=2000) as client:
        served = rerank(client, "u1")
        assert (served["degraded"], served["reasons"]) == (False, [])
    nan = np.full(DIM, np.nan, dtype="<f4").tobytes()
    redis.Redis.from_url(redis_server.url).hset(
        "ltr:emb:uc:v2", mapping=dict.fromkeys(CLUSTERS, nan)
    )
    with make_client(redis_url=redis_server.url, redis_deadline_ms=2000) as client:
        served = rerank(client, "u1")
        assert (served["degraded"], served["reasons"]) == (True, ["embedding_malformed_in_redis"])
