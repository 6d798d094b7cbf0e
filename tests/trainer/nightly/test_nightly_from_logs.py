"""The loop runs by itself: the service logs what it served, clients send clicks, and the nightly
job trains on those logs and publishes (serve → log → click → retrain → gate → publish)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest
from pydantic import ValidationError

from app.artifacts.store import load_version, read_current
from tests.app.api.conftest import NF, ClientFactory, ensemble, make_client, registry_dir
from trainer.nightly.config import NightlyConfig
from trainer.nightly.run import run_nightly

__all__ = ["ensemble", "make_client", "registry_dir"]


def test_nightly_trains_on_served_impressions_and_clicks(
    make_client: ClientFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log_file = tmp_path / "impressions.jsonl"
    rng = np.random.default_rng(0)
    with make_client(impressions_enabled=True, impressions_jsonl=log_file) as client:
        for q in range(80):
            rows = rng.random((8, NF), dtype=np.float32)
            candidates = [{"id": f"d{i}", "features": rows[i].tolist()} for i in range(8)]
            body = {"request_id": f"r{q}", "query_id": f"q{q}", "candidates": candidates}
            served = client.post("/rerank", json=body).json()["results"]
            # Users click the candidate whose first feature is largest, wherever it was shown.
            best = f"d{int(np.argmax(rows[:, 0]))}"
            assert any(r["id"] == best for r in served)
            click = {"request_id": f"r{q}", "events": [{"id": best, "type": "click"}]}
            assert client.post("/feedback", json=click).status_code == 202
    config = NightlyConfig.model_validate(
        {
            "work_dir": str(tmp_path / "work"),
            "data": {"source": "logs", "dir": str(log_file), "holdout_fraction": 0.25},
            "model": {
                "name": "from-logs",
                "lambdamart": {"num_trees": 20, "num_leaves": 4, "min_data_in_leaf": 5},
            },
            "publish": {"registry": str(tmp_path / "registry")},
        }
    )
    outcome = run_nightly(config)
    registry = tmp_path / "registry"
    assert read_current(registry, "from-logs") == outcome.published.version
    assert outcome.gate.passed
    # The clicks follow feature 0, so the model learned to rank by it: far better than chance.
    assert outcome.gate.candidate["mrr"] > 0.8
    manifest = load_version(registry / "from-logs" / outcome.published.version).manifest
    assert len(manifest.feature_names) == NF
    # Debiased by default: the click model with the curve EM estimated on the training clicks,
    # and the gate compares IPW DCG on the holdout.
    assert config.gate.metric == "dcg@10"
    assert manifest.training["objective"]["lambdas"] == "click_likelihood"
    assert manifest.training["valid_metric"] == "dcg@10"
    assert (tmp_path / "work" / "propensities.json").is_file()
    # 60 training clicks over 8 positions: sparse positions share a theta, and the run says so.
    report = orjson.loads((outcome.report_dir / "report.json").read_bytes())
    assert report["data"]["pooled_positions"]
    assert "their examination is estimated jointly" in caplog.text


def test_debias_settings_are_checked() -> None:
    logs = {"source": "logs", "dir": "x"}
    raw = NightlyConfig.model_validate({"data": {**logs, "debias": "none"}})
    assert raw.gate.metric == "ndcg@10"
    files = NightlyConfig.model_validate({"data": {"dir": "x"}})
    assert files.gate.metric == "ndcg@10"
    chosen = NightlyConfig.model_validate({"data": logs, "gate": {"metric": "mrr"}})
    assert chosen.gate.metric == "mrr"
    # IPW DCG is not on NDCG's scale: a relative tolerance unless one is set.
    assert (chosen.gate.tolerance, chosen.gate.relative_tolerance) == (0.0, 0.01)
    assert (raw.gate.tolerance, raw.gate.relative_tolerance) == (0.002, 0.0)
    assert (files.gate.tolerance, files.gate.relative_tolerance) == (0.002, 0.0)
    kept = NightlyConfig.model_validate({"data": logs, "gate": {"tolerance": 0.05}})
    assert (kept.gate.tolerance, kept.gate.relative_tolerance) == (0.05, 0.0)
    with pytest.raises(ValidationError, match="native engine only"):
        NightlyConfig.model_validate({"data": logs, "model": {"engine": "lightgbm"}})
    with pytest.raises(ValidationError, match="debias"):
        NightlyConfig.model_validate({"data": {**logs, "debias": "dpo"}})
