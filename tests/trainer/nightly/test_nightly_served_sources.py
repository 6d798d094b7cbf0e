"""Retraining on the logs of a model with query and item-store features keeps its sources: the
new version takes candidate ids (not every feature again) and carries an item snapshot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.artifacts.store import load_version, read_current
from app.main import create_app
from tests.app.api.conftest import app_settings, wait_ready
from tests.support import random_ensemble
from tests.support.sourced_model import item_table, publish_sourced
from trainer.data.errors import DataFormatError
from trainer.features.item_table import ItemTable
from trainer.nightly.config import NightlyConfig
from trainer.nightly.run import run_nightly

NAMES = ["bm25", "price", "qlen", "ctr"]
SOURCES: dict[str, Any] = {"price": "item", "ctr": "item", "qlen": "query"}
SET_NAMES = ["ctr", "spare", "price"]
N_ITEMS = 40


def serve_and_log(registry: Path, log: Path, table: ItemTable) -> None:
    """Id-only requests with clicks on the item with the largest ctr (an item-store feature)."""
    rng = np.random.default_rng(1)
    ctr = dict(zip(table.ids.tolist(), table.matrix[:, 0].tolist(), strict=True))
    settings = app_settings(registry=registry, impressions_enabled=True, impressions_jsonl=log)
    with TestClient(create_app(settings)) as client:
        wait_ready(client)
        for q in range(120):
            ids = rng.choice(table.ids, 8, replace=False).tolist()
            body = {
                "request_id": f"r{q}",
                "query": {"features": {"qlen": float(q % 5)}},
                "candidates": [{"id": i, "features": {"bm25": float(rng.random())}} for i in ids],
            }
            assert client.post("/rerank", json=body).status_code == 200
            best = max(ids, key=ctr.__getitem__)
            click = {"request_id": f"r{q}", "events": [{"id": best, "type": "click"}]}
            assert client.post("/feedback", json=click).status_code == 202


def config(tmp_path: Path, registry: Path, log: Path, **features: Any) -> NightlyConfig:
    return NightlyConfig.model_validate(
        {
            "work_dir": str(tmp_path / "work"),
            "data": {"source": "logs", "dir": str(log), "holdout_fraction": 0.25},
            "features": features,
            "model": {
                "name": "m",
                "lambdamart": {"num_trees": 15, "num_leaves": 4, "min_data_in_leaf": 5},
            },
            # The deployed random model is no baseline to beat: any learned one may go out.
            "gate": {"tolerance": 1.0},
            "publish": {"registry": str(registry)},
        }
    )


@pytest.fixture
def served(tmp_path: Path) -> tuple[Path, Path, ItemTable]:
    registry, log = tmp_path / "registry", tmp_path / "impressions.jsonl"
    table = item_table(N_ITEMS, SET_NAMES, seed=3)
    model = random_ensemble(len(NAMES), num_trees=10, depth=3, seed=2)
    publish_sourced(registry, model, SOURCES, table, feature_names=NAMES)
    serve_and_log(registry, log, table)
    return registry, log, table


def test_retrained_version_keeps_sources_and_snapshot(
    served: tuple[Path, Path, ItemTable], tmp_path: Path
) -> None:
    registry, log, table = served
    outcome = run_nightly(config(tmp_path, registry, log))
    version = read_current(registry, "m")
    assert version == outcome.published.version != "v1"
    manifest = load_version(registry / "m" / version).manifest
    assert manifest.feature_names == NAMES
    assert manifest.feature_sources == SOURCES
    assert manifest.item_features is not None and manifest.item_features.matrix_file
    assert manifest.item_features.version == table.version()  # the deployed snapshot, reused
    # The new version serves id-only requests from its own snapshot.
    with TestClient(create_app(app_settings(registry=registry))) as client:
        wait_ready(client)
        ids = table.ids[:6].tolist()
        body = {"candidates": [{"id": i, "features": {"bm25": 0.5}} for i in ids]}
        answer = client.post("/rerank", json=body).json()
        assert answer["model"]["version"] == version
        assert answer["item_features_missing"] == 0 and not answer["degraded"]


def test_a_fresh_item_table_becomes_the_snapshot(
    served: tuple[Path, Path, ItemTable], tmp_path: Path
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    registry, log, table = served
    fresh = tmp_path / "items.parquet"
    columns = {"doc_id": table.ids.tolist()}
    columns |= {n: (table.matrix[:, j] + 1).tolist() for j, n in enumerate(SET_NAMES)}
    pq.write_table(pa.table(columns), fresh)
    run_nightly(config(tmp_path, registry, log, items=str(fresh)))
    manifest = load_version(registry / "m" / str(read_current(registry, "m"))).manifest
    assert manifest.item_features is not None
    assert manifest.item_features.version != table.version()

    pq.write_table(pa.table({"doc_id": table.ids.tolist(), "price": [1.0] * N_ITEMS}), fresh)
    with pytest.raises(DataFormatError, match="ctr"):
        run_nightly(config(tmp_path, registry, log, items=str(fresh)))
