"""Explanations through the real server: uvicorn in a child process, HTTP from this one,
while other requests keep being answered."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import orjson
import pytest

from app.artifacts.tree_dump import TreeEnsemble
from app.explain.treeshap import TreeShapExplainer
from tests.support import publish, random_ensemble
from tests.support.uvicorn_server import uvicorn_server

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NF = 12


def test_explained_results_over_real_sockets(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    plain = random_ensemble(NF, num_trees=30, depth=5, seed=4)
    model = TreeEnsemble(
        NF, [t.with_leaf_covers(rng.integers(1, 90, t.num_leaves)) for t in plain.trees], 0.5
    )
    publish(tmp_path, model, name="m", version="v1")
    rows = rng.normal(0, 1, (200, NF)).astype(np.float32)
    rows[rng.random(rows.shape) < 0.1] = np.nan
    cands = [
        {"id": i, "features": [None if np.isnan(v) else float(v) for v in row]}
        for i, row in enumerate(rows)
    ]
    explained = orjson.dumps({"candidates": cands, "top_k": 10, "explain": {"top": 4}})
    unexplained = orjson.dumps({"candidates": cands, "top_k": 10})
    env = {
        "LTR_REGISTRY": str(tmp_path),
        "LTR_RELOAD_POLL_SECONDS": "0",
        # The first explanation loads the kernel: far longer than the default 100 ms budget.
        "LTR_REQUEST_BUDGET_MS": "120000",
        "LTR_MAX_REQUEST_BUDGET_MS": "120000",
    }
    with uvicorn_server(env) as server, httpx.Client(base_url=server.url, timeout=120) as client:
        with ThreadPoolExecutor(2) as pool:  # the first explanation loads the kernel meanwhile
            first = pool.submit(client.post, "/rerank", content=explained)
            others = [pool.submit(client.post, "/rerank", content=unexplained) for _ in range(5)]
            assert all(f.result().status_code == 200 for f in others)
            body = first.result().json()
        phi = TreeShapExplainer(model).contributions(rows)
        for result in body["results"]:
            ex = result["explanation"]
            assert ex["expected_value"] == pytest.approx(phi[0, -1], abs=1e-12)
            shown = sum(f["contribution"] for f in ex["features"])
            assert ex["expected_value"] + shown + ex["rest"] == pytest.approx(result["score"])
            for f in ex["features"]:
                assert f["contribution"] == pytest.approx(phi[result["id"], int(f["name"][1:])])
        bad = client.post("/rerank", content=orjson.dumps({"candidates": cands, "explain": 3}))
        assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "explain"]
