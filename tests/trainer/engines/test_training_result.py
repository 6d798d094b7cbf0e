from __future__ import annotations

from pathlib import Path

from trainer.engines.training_result import TrainingResult

WRITTEN = {"model_dir": Path("models/m/v1"), "name": "m", "version": "v1"}


def test_tree_json_has_the_tree_fields_in_order_and_no_training_record() -> None:
    result = TrainingResult(
        **WRITTEN,
        kind="lambdamart",
        engine="native",
        metrics={"ndcg@10": 0.5, "queries": 3},
        trees=8,
        best_iteration=8,
        seconds=1.25,
        evaluated_on="valid",
    )
    assert list(result.as_json()) == [
        "model_dir", "name", "version", "kind", "engine",
        "trees", "best_iteration", "seconds", "evaluated_on", "metrics",
    ]  # fmt: skip
    assert result.as_json()["model_dir"] == "models/m/v1"


def test_dnn_json_has_the_training_record_and_no_tree_fields() -> None:
    result = TrainingResult(
        **WRITTEN,
        kind="lambdadnn",
        engine="dnn",
        metrics={},
        training={"engine": "dnn", "best_epoch": 3},
    )
    assert list(result.as_json()) == [
        "model_dir", "name", "version", "kind", "engine", "training", "metrics",
    ]  # fmt: skip
    assert result.as_json()["training"] == {"engine": "dnn", "best_epoch": 3}
