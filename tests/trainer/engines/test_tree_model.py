from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.artifacts.store import load_version
from app.artifacts.tree_dump import TreeEnsemble
from app.scoring.reference import predict
from trainer.engines.tree_model import train_tree_model
from trainer.lambdamart.params import LambdaMARTParams
from trainer.metrics.report import ranking_report

PARAMS = LambdaMARTParams(num_trees=8, num_leaves=7, threads=1, seed=1)


@pytest.mark.parametrize("engine", ["native", "lightgbm"])
def test_train_and_export(engine: str, tmp_path: Path, demo_train, demo_valid) -> None:
    summary = train_tree_model(engine, demo_train, demo_valid, PARAMS, tmp_path / "v1", name="m")
    artifact = load_version(summary.model_dir)
    manifest = artifact.manifest
    assert (manifest.name, manifest.version, manifest.kind) == ("m", "v1", "lambdamart")
    assert manifest.training["engine"] == engine
    assert manifest.training["params"]["num_leaves"] == 7
    assert manifest.feature_names == demo_train.names()
    ensemble = TreeEnsemble.from_json_bytes(artifact.files["model.json"])
    assert len(ensemble.trees) == summary.trees <= 8
    report = ranking_report(
        predict(ensemble, demo_valid.features), demo_valid.labels, demo_valid.group_offsets
    )
    assert summary.metrics == report
    assert summary.evaluated_on == "valid"
    assert manifest.metrics["ndcg@10"]["value"] == report["ndcg@10"]
    assert manifest.metrics["ndcg@10"]["dataset"] == demo_valid.source


def test_without_validation_data_reports_on_train(tmp_path: Path, demo_train) -> None:
    summary = train_tree_model("native", demo_train, None, PARAMS, tmp_path / "v2")
    assert summary.evaluated_on == "train" and summary.metrics["queries"] == 201
    assert summary.name == "default"


def test_unknown_engine(tmp_path: Path, demo_train) -> None:
    with pytest.raises(ValueError, match="unknown tree engine"):
        train_tree_model("catboost", demo_train, None, PARAMS, tmp_path / "v3")
    assert not np.any([p.exists() for p in [tmp_path / "v3"]])


def test_the_validation_metric_named_in_the_manifest_is_among_its_metrics(
    tmp_path: Path, demo_train, demo_valid
) -> None:
    """--eval-at 7: the manifest's valid_metric said ndcg@7, which no metric gave."""
    params = PARAMS.model_copy(update={"eval_at": 7})
    summary = train_tree_model("native", demo_train, demo_valid, params, tmp_path / "v3")
    manifest = load_version(summary.model_dir).manifest
    assert manifest.training["valid_metric"] == "ndcg@7"
    assert "ndcg@7" in summary.metrics and "ndcg@7" in manifest.metrics
