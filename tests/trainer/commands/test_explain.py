"""`ltr explain`: pairs, one query, the global HTML view; native and converted models."""

from __future__ import annotations

import json
from pathlib import Path

import lightgbm as lgb
import numpy as np
import pytest
from typer.testing import CliRunner

from app.artifacts.store import load_version
from app.artifacts.tree_dump import TreeEnsemble
from app.scoring.reference import predict
from trainer.cli import app
from trainer.data.loader import load_dataset

from .conftest import TEST, TRAIN, one_error_line

FAST = ["--num-trees", "8", "--num-leaves", "7", "--threads", "1"]


@pytest.fixture(scope="module")
def native_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("native") / "v1"
    result = CliRunner().invoke(app, ["train", "--train", str(TRAIN), "--out", str(out), *FAST])
    assert result.exit_code == 0, result.stderr
    return out


@pytest.fixture(scope="module")
def converted_dir(lightgbm_model_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("lgb") / "v1"
    args = ["convert", "--from", "lightgbm", str(lightgbm_model_file), "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.stderr
    return out


def _first_query(path: Path) -> tuple[str, np.ndarray]:
    data = load_dataset(path, num_features=300)
    lo, hi = data.group_offsets[:2]
    return str(data.query_ids[0]), data.features[lo:hi]


def test_native_export_has_covers_and_contributions_sum_to_scores(
    runner: CliRunner, native_dir: Path
) -> None:
    ensemble = TreeEnsemble.from_json_bytes(load_version(native_dir).files["model.json"])
    assert ensemble.has_covers
    query, rows = _first_query(TEST)
    result = runner.invoke(
        app,
        ["explain", "--model", str(native_dir), "--data", str(TEST), "--query", query, "--json"],
    )
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    scores = predict(ensemble, rows)  # what the service serves, bit for bit
    assert [d["score"] for d in report["documents"]] == sorted(scores.tolist(), reverse=True)
    for d in report["documents"]:
        parts = sum(f["contribution"] for f in d["features"]) + d["rest"]
        assert report["expected_value"] + parts == pytest.approx(d["score"], abs=1e-9)


def test_pair_shows_what_separates_two_documents(
    runner: CliRunner, converted_dir: Path, lightgbm_model_file: Path
) -> None:
    query, rows = _first_query(TEST)
    args = ["explain", "--model", str(converted_dir), "--data", str(TEST), "--query", query]
    result = runner.invoke(app, [*args, "--pair", "1,3", "--top", "4", "--json"])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    booster = lgb.Booster(model_file=str(lightgbm_model_file))
    phi = booster.predict(rows[[0, 2]].astype(np.float64), pred_contrib=True)
    diff = phi[0, :-1] - phi[1, :-1]
    assert report["difference"] == pytest.approx(phi[0].sum() - phi[1].sum(), abs=1e-9)
    top = np.argsort(-np.abs(diff), kind="stable")[:4]
    assert [f["name"] for f in report["features"]] == [f"f{j + 1}" for j in top if diff[j]]
    for f in report["features"]:
        j = int(f["name"][1:]) - 1
        assert f["difference"] == pytest.approx(diff[j], abs=1e-9)
    shown = sum(f["difference"] for f in report["features"])
    assert shown + report["rest"] == pytest.approx(report["difference"], abs=1e-9)
    text = runner.invoke(app, [*args, "--pair", "1,3"]).stdout
    assert "document 1 (score" in text and "(other features)" in text


def test_global_view_writes_html(runner: CliRunner, converted_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "why.html"
    args = ["explain", "--model", str(converted_dir), "--data", str(TEST), "--out", str(out)]
    result = runner.invoke(app, [*args, "--rows", "300", "--json"])
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["rows"] == 300 and summary["method"] == "treeshap"
    means = [f["mean_abs"] for f in summary["features"]]
    assert means == sorted(means, reverse=True) and means[0] > 0
    page = out.read_text()
    assert page.startswith("<!doctype html>") and page.count("<svg") >= 3
    assert summary["features"][0]["name"] in page


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--pair", "1,2"], "--pair needs --query"),
        (["--query", "nope"], "no query 'nope'"),
        (["--query", "{q}", "--pair", "1"], "give two document numbers"),
        (["--query", "{q}", "--pair", "1,999"], "not 999"),
        (["--query", "{q}", "--pair", "2,2"], "two different documents"),
    ],
)
def test_bad_arguments(runner: CliRunner, converted_dir: Path, extra: list[str], message: str):
    query, _ = _first_query(TEST)
    extra = [e.replace("{q}", query) for e in extra]
    result = runner.invoke(
        app, ["explain", "--model", str(converted_dir), "--data", str(TEST), *extra]
    )
    assert result.exit_code == 2
    assert message in one_error_line(result.stderr)


def test_a_model_without_covers_says_how_to_fix(runner: CliRunner, tmp_path: Path) -> None:
    from tests.support import publish, random_ensemble

    publish(tmp_path, random_ensemble(300, seed=1), name="old", version="v1")
    result = runner.invoke(
        app, ["explain", "--model", str(tmp_path / "old" / "v1"), "--data", str(TEST)]
    )
    assert result.exit_code == 2
    assert "node covers" in one_error_line(result.stderr)


def test_networks_are_explained_by_occlusion(runner: CliRunner, tmp_path: Path) -> None:
    import datetime as dt

    from app.artifacts.manifest import Manifest, MissingValueRule
    from app.artifacts.store import write_version_dir
    from tests.support.onnx_models import linear_onnx

    weights = np.array([1.0, -2.0, 0.0, 0.5, 4.0], np.float32)
    manifest = Manifest(
        name="net",
        version="v1",
        kind="lambdadnn",
        created_at=dt.datetime.now(dt.UTC),
        feature_names=[f"f{i + 1}" for i in range(5)],
        missing_value=MissingValueRule(handled_by="mean_imputation"),
    )
    version = write_version_dir(tmp_path / "v1", manifest, {"model.onnx": linear_onnx(weights)})
    data = tmp_path / "d.txt"
    data.write_text("1 qid:7 1:0.9 2:0.1 5:1.0\n0 qid:7 1:0.2 2:0.8 4:0.3\n")
    args = ["explain", "--model", str(version), "--data", str(data), "--query", "7"]
    result = runner.invoke(app, [*args, "--pair", "1,2", "--json"])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["method"] == "occlusion"
    a, b = np.array([0.9, 0.1, 0.0, 0.0, 1.0]), np.array([0.2, 0.8, 0.0, 0.3, 0.0])
    diff = (a - b) * weights  # additive: occlusion differences are exact
    for f in report["features"]:
        j = int(f["name"][1:]) - 1
        assert f["difference"] == pytest.approx(diff[j], abs=1e-5)
    assert report["difference"] == pytest.approx(diff.sum(), abs=1e-5)


@pytest.fixture(scope="module")
def item_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(a version trained with item features, its validation data, the item table)."""
    from tests.support.item_data import write_sourced_data

    root = tmp_path_factory.mktemp("items")
    train, valid, items = write_sourced_data(root, n_queries=30)
    out = root / "v1"
    args = ["train", "--train", str(train), "--items", str(items), "--out", str(out), *FAST]
    result = CliRunner().invoke(app, [*args, "--query-features", "query_length"])
    assert result.exit_code == 0, result.stderr
    return out, valid, items


def test_item_features_are_joined_by_document_id(
    runner: CliRunner, item_model: tuple[Path, Path, Path]
) -> None:
    from app.scoring.loader import load_scorer

    from .test_evaluate import served_rows

    model, valid, items = item_model
    rows, _ = served_rows(model, valid, items)
    data = load_dataset(valid, id_column="doc_id")
    lo, hi = (int(x) for x in data.group_offsets[:2])
    query = str(data.query_ids[0])
    args = ["explain", "--model", str(model), "--data", str(valid), "--query", query, "--json"]
    result = runner.invoke(app, [*args, "--top", "6"])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    served = load_scorer(load_version(model)).score(rows[lo:hi])
    assert [d["score"] for d in report["documents"]] == pytest.approx(
        sorted(served.tolist(), reverse=True), abs=1e-9
    )
    names = load_version(model).manifest.feature_names
    for doc in report["documents"]:
        row = rows[lo + doc["document"] - 1]
        for f in doc["features"]:
            value = row[names.index(f["name"])]
            assert f["value"] == (None if np.isnan(value) else pytest.approx(value))
    missing = int(np.isnan(rows[lo:hi, names.index("price")]).sum())
    assert report["items"]["documents"] == hi - lo and report["items"]["missing"] == missing
    text = runner.invoke(app, args[:-1]).stdout
    assert f"items: {missing} of {hi - lo} documents not in {model}" in text


def test_documents_are_named_by_their_ids(
    runner: CliRunner, item_model: tuple[Path, Path, Path]
) -> None:
    """Data with a document id column: each document carries its id, in JSON and text (a
    held-out trial found only numbers, where requests and logs name items by id)."""
    model, valid, _ = item_model
    data = load_dataset(valid, id_column="doc_id")
    lo = int(data.group_offsets[0])
    assert data.doc_ids is not None
    query = str(data.query_ids[0])
    args = ["explain", "--model", str(model), "--data", str(valid), "--query", query]
    report = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    for doc in report["documents"]:
        assert doc["id"] == str(data.doc_ids[lo + doc["document"] - 1])
    top = report["documents"][0]
    text = runner.invoke(app, args).stdout
    assert f"  1. document {top['document']} ({top['id']})" in text
    pair = runner.invoke(app, [*args, "--pair", "1,2", "--json"])
    assert json.loads(pair.stdout)["b"]["id"] == str(data.doc_ids[lo + 1])
    by_ids = runner.invoke(
        app, [*args, "--pair", f"{data.doc_ids[lo]},{data.doc_ids[lo + 1]}", "--json"]
    )
    assert json.loads(by_ids.stdout) == json.loads(pair.stdout)
    unknown = runner.invoke(app, [*args, "--pair", "1,no-such-doc"])
    assert unknown.exit_code == 2
    assert "give two document numbers, e.g. 1,4, or two of the query's ids" in unknown.stderr
    assert (
        f"document 1 ({data.doc_ids[lo]}) (score"
        in runner.invoke(app, [*args, "--pair", "1,2"]).stdout
    )


def test_item_model_global_view_and_errors(
    runner: CliRunner, item_model: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    model, valid, items = item_model
    args = ["explain", "--model", str(model), "--out", str(tmp_path / "why.html"), "--data"]
    result = runner.invoke(app, [*args, str(valid), "--items", str(items), "--json"])
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["items"]["source"] == str(items) and summary["items"]["documents"] == 300
    assert 0 < summary["items"]["missing"] < 300
    result = runner.invoke(app, [*args, str(TEST)])
    assert "give Parquet data with a 'doc_id' column" in one_error_line(result.stderr)


def test_infinite_values_are_spelled_out_and_a_zero_document_has_no_stray_comma(
    runner: CliRunner, native_dir: Path, tmp_path: Path
) -> None:
    """A trial: `--json` wrote +-inf feature values as null (the product's missing value), and
    a model whose contributions were all 0 printed `+0.55700  , other features`."""
    label, *values = TEST.read_text().split("\n", 1)[0].split()  # LETOR without qid
    hot = " ".join(f"{v.split(':')[0]}:inf" for v in values)
    data = tmp_path / "inf.txt"
    data.write_text(f"{label} qid:1 {hot}\n0 qid:1 {' '.join(values)}\n")
    args = ["explain", "--model", str(native_dir), "--data", str(data), "--query", "1"]
    report = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    shown = [f["value"] for f in report["documents"][0]["features"]] + [
        f["value"] for f in report["documents"][1]["features"]
    ]
    assert "Infinity" in shown and None not in shown
    text = runner.invoke(app, args).stdout
    assert "=inf " in text

    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 3))
    booster = lgb.train(
        {"objective": "regression", "min_data_in_leaf": 1000, "verbose": -1, "num_leaves": 2},
        lgb.Dataset(x, label=rng.normal(size=40)),
        num_boost_round=2,
    )
    (tmp_path / "flat.txt").write_text(booster.model_to_string())
    out = tmp_path / "flat" / "v1"
    convert = ["convert", "--from", "lightgbm", str(tmp_path / "flat.txt"), "--out", str(out)]
    assert runner.invoke(app, convert).exit_code == 0
    rows = tmp_path / "rows.txt"
    rows.write_text("1 qid:1 1:0.5 2:1 3:2\n0 qid:1 1:0.1 2:0.2 3:0.3\n")
    flat = runner.invoke(app, ["explain", "--model", str(out), "--data", str(rows), "--query", "1"])
    assert flat.exit_code == 0, flat.stderr
    assert ", other features" not in flat.stdout and "  other features +0.0000" in flat.stdout
