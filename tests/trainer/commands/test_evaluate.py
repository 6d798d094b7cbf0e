from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import lightgbm as lgb
import numpy as np
import pytest
from typer.testing import CliRunner

from app.artifacts.manifest import (
    Manifest,
    MissingValueRule,
)
from app.artifacts.store import write_version_dir
from app.scoring.onnx_scorer import OnnxScorer
from trainer.cli import app
from trainer.data.loader import load_dataset
from trainer.metrics.report import ranking_report

from .conftest import TEST, one_error_line

REPORT_KEYS = {
    "ndcg@1",
    "ndcg@3",
    "ndcg@5",
    "ndcg@10",
    "map",
    "mrr",
    "err@10",
    "dcg@10",
    "queries",
    "documents",
}


@pytest.fixture(scope="module")
def version_dir(lightgbm_model_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("reg") / "v1"
    result = CliRunner().invoke(
        app,
        [
            "convert",
            "--from",
            "lightgbm",
            str(lightgbm_model_file),
            "--out",
            str(out),
            "--name",
            "ranker",
        ],
    )
    assert result.exit_code == 0, result.stderr
    return out


def test_json_report_matches_lightgbm(
    runner: CliRunner, version_dir: Path, lightgbm_model_file: Path
) -> None:
    result = runner.invoke(
        app, ["evaluate", "--model", str(version_dir), "--data", str(TEST), "--json"]
    )
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)  # exactly one JSON object on stdout
    assert set(report) >= REPORT_KEYS
    assert report["model"] == {"name": "ranker", "version": "v1", "kind": "lambdamart"}
    test = load_dataset(TEST, num_features=300)
    booster = lgb.Booster(model_file=str(lightgbm_model_file))
    expected = ranking_report(
        np.asarray(booster.predict(test.features)), test.labels, test.group_offsets
    )
    for key in REPORT_KEYS:
        assert report[key] == pytest.approx(expected[key], abs=1e-12)
    assert (report["queries"], report["documents"]) == (50, 768)


def test_human_output_and_empty_query_convention(
    runner: CliRunner, version_dir: Path, tmp_path: Path
) -> None:
    # one query with no relevant document: its NDCG is the chosen convention
    data = tmp_path / "d.txt"
    data.write_text("0 qid:1 1:0.5\n0 qid:1 1:0.25\n2 qid:2 1:0.5\n0 qid:2 1:0.1\n")
    args = ["evaluate", "--model", str(version_dir), "--data", str(data)]
    one = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    zero = json.loads(runner.invoke(app, [*args, "--json", "--empty-query-ndcg", "0"]).stdout)
    assert one["ndcg@10"] - zero["ndcg@10"] == pytest.approx(0.5)
    human = runner.invoke(app, args)
    assert human.exit_code == 0
    assert "ndcg@10" in human.stdout and "ranker v1" in human.stdout


def test_errors(runner: CliRunner, version_dir: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["evaluate", "--model", str(tmp_path), "--data", str(TEST)])
    assert result.exit_code == 2 and "manifest.json: cannot read" in one_error_line(result.stderr)
    bad = tmp_path / "bad.txt"
    bad.write_text("1 qid:1 1:0.5\n1 qid:2 1:0.5\n1 qid:1 2:0.5\n")
    result = runner.invoke(app, ["evaluate", "--model", str(version_dir), "--data", str(bad)])
    assert result.exit_code == 2 and f"error: {bad}:3: " in one_error_line(result.stderr)
    wide = tmp_path / "wide.txt"
    wide.write_text("1 qid:1 301:0.5\n")
    result = runner.invoke(app, ["evaluate", "--model", str(version_dir), "--data", str(wide)])
    assert result.exit_code == 2 and str(wide) in one_error_line(result.stderr)


def test_corrupt_model_file(runner: CliRunner, version_dir: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "v1"
    shutil.copytree(version_dir, copy)
    model = copy / "model.json"
    model.write_bytes(model.read_bytes().replace(b"0.", b"1.", 1))
    result = runner.invoke(app, ["evaluate", "--model", str(copy), "--data", str(TEST)])
    assert result.exit_code == 2 and "sha256 mismatch" in one_error_line(result.stderr)


def linear_onnx(weights: np.ndarray) -> bytes:
    """A network scoring `features @ weights`, with the service's graph interface."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    n_features = weights.shape[0]
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["features", "w"], ["col"]),
            helper.make_node("Reshape", ["col", "shape"], ["scores"]),
        ],
        "linear",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["N", n_features])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N"])],
        initializer=[
            numpy_helper.from_array(weights.reshape(-1, 1).astype(np.float32), "w"),
            numpy_helper.from_array(np.array([-1], dtype=np.int64), "shape"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def test_network_model_scores_through_onnxruntime(runner: CliRunner, tmp_path: Path) -> None:
    weights = np.random.default_rng(0).normal(size=300)
    manifest = Manifest(
        name="net",
        version="n1",
        kind="lambdadnn",
        created_at=dt.datetime.now(dt.UTC),
        feature_names=[f"f{i + 1}" for i in range(300)],
        missing_value=MissingValueRule(handled_by="mean_imputation"),
    )
    out = write_version_dir(tmp_path / "n1", manifest, {"model.onnx": linear_onnx(weights)})
    result = runner.invoke(app, ["evaluate", "--model", str(out), "--data", str(TEST), "--json"])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["model"]["kind"] == "lambdadnn"
    test = load_dataset(TEST, num_features=300)
    onnx_scores = OnnxScorer(linear_onnx(weights)).score(test.features)
    np.testing.assert_allclose(onnx_scores, test.features @ weights, rtol=1e-4, atol=1e-4)
    expected = ranking_report(onnx_scores, test.labels, test.group_offsets)
    assert {k: report[k] for k in REPORT_KEYS} == expected
