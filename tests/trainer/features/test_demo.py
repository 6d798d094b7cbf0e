"""`demo-items` (ltr serve --demo): the bundled data as an item catalogue, served by id."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.artifacts.store import load_version, set_current
from app.artifacts.tree_dump import TreeEnsemble
from app.main import create_app
from app.scoring.reference import predict
from tests.app.api.conftest import app_settings, wait_ready
from trainer.data.loader import load_dataset
from trainer.features import demo
from trainer.lambdamart.params import LambdaMARTParams

DEMO = Path(__file__).resolve().parents[3] / "trainer" / "demo_data"


def test_demo_items_answers_id_only_requests(tmp_path: Path) -> None:
    train = load_dataset(DEMO / "rank.train")
    test = load_dataset(DEMO / "rank.test", feature_names=train.names())
    params = LambdaMARTParams.model_validate({"num_trees": 5, "num_leaves": 7, "threads": 1})
    registry = tmp_path / "registry"
    out = registry / demo.NAME / "v1"
    summary = demo.train_demo_items(train, test, out, params)
    assert summary.model_dir == out
    set_current(registry, demo.NAME, "v1")
    artifact = load_version(out)
    m = artifact.manifest
    assert m.candidate_feature_names == [f"f{i}" for i in range(1, 21)]
    assert m.names_from("item") == [f"f{i}" for i in range(21, 301)]
    first_test = train.num_docs  # test rows continue the numbering
    ids = [f"doc-{first_test + i}" for i in range(3)]
    cands = [{"id": ids[0], "features": {"f12": 0.5, "f17": 0.9}}, {"id": ids[1]}, {"id": ids[2]}]
    with TestClient(create_app(app_settings(registry=registry))) as client:
        wait_ready(client)
        resp = client.post("/rerank", json={"model": demo.NAME, "candidates": cands})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["item_features_missing"] == 0 and not body["degraded"]
    rows = np.full((3, 300), np.nan, dtype=np.float32)
    rows[:, 20:] = test.features[:3, 20:]
    rows[0, 11], rows[0, 16] = 0.5, 0.9
    ensemble = TreeEnsemble.from_json_bytes(artifact.files["model.json"])
    expected = dict(zip(ids, predict(ensemble, rows).tolist(), strict=True))
    assert {r["id"]: r["score"] for r in body["results"]} == pytest.approx(expected)
