"""`ltr explain --query`: how queries are numbered, what each document's entry holds, and data
without usable labels (explanations never read them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from tests.trainer.test_cli_help import flat
from trainer.cli import app
from trainer.data.loader import load_dataset

from .conftest import TEST, one_error_line

QUERIES = 12
PER_QUERY = 6


@pytest.fixture(scope="module")
def version_dir(lightgbm_model_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo LightGBM model converted (300 features, trained without names: f1..f300)."""
    out = tmp_path_factory.mktemp("lgb") / "v1"
    args = ["convert", "--from", "lightgbm", str(lightgbm_model_file), "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.stderr
    return out


def _frame(first_qid: int = 2000) -> pd.DataFrame:
    """The first QUERIES * PER_QUERY rows of the demo test data as Parquet columns."""
    test = load_dataset(TEST, num_features=300)
    n = QUERIES * PER_QUERY
    frame = pd.DataFrame(test.features[:n], columns=[f"f{j + 1}" for j in range(300)])
    frame.insert(0, "label", test.labels[:n].astype(np.int64))
    frame.insert(0, "qid", first_qid + np.repeat(np.arange(QUERIES), PER_QUERY))
    return frame


def _explain(runner: CliRunner, model: Path, data: Path, *extra: str) -> dict[str, Any]:
    args = ["explain", "--model", str(model), "--data", str(data), *extra]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.stderr
    return dict(json.loads(result.stdout))


def test_queries_without_qid_are_numbered_from_0(runner: CliRunner, version_dir: Path) -> None:
    test = load_dataset(TEST, num_features=300)
    report = _explain(runner, version_dir, TEST, "--query", "0")
    assert len(report["documents"]) == int(test.group_offsets[1])
    args = ["explain", "--model", str(version_dir), "--data", str(TEST), "--query", "50"]
    line = one_error_line(runner.invoke(app, args).stderr)
    assert f"{TEST}: no query '50'" in line and "0..49" in line and "file order" in line


def test_help_says_how_queries_and_documents_are_numbered(runner: CliRunner) -> None:
    text = flat(runner.invoke(app, ["explain", "--help"], env={"COLUMNS": "200"}).stdout)
    assert "without qid" in text and "from 0 in file order" in text
    assert "from 1 in file order" in text


def test_unknown_qid_shows_the_data_qids(
    runner: CliRunner, version_dir: Path, tmp_path: Path
) -> None:
    data = tmp_path / "q.parquet"
    _frame().to_parquet(data)
    args = ["explain", "--model", str(version_dir), "--data", str(data), "--query", "1001"]
    line = one_error_line(runner.invoke(app, args).stderr)
    assert "no query '1001'" in line and "12 queries" in line
    assert "2000, 2001, 2002, ..., 2011" in line


def test_each_document_has_rest_label_and_rank(
    runner: CliRunner, version_dir: Path, tmp_path: Path
) -> None:
    frame = _frame()
    data = tmp_path / "q.parquet"
    frame.to_parquet(data)
    report = _explain(runner, version_dir, data, "--query", "2003", "--top", "2")
    labels = frame["label"].to_numpy()[3 * PER_QUERY : 4 * PER_QUERY]
    docs = report["documents"]
    assert [d["rank"] for d in docs] == list(range(1, PER_QUERY + 1))
    for doc in docs:
        assert len(doc["features"]) == 2
        shown = sum(f["contribution"] for f in doc["features"])
        assert report["expected_value"] + shown + doc["rest"] == pytest.approx(
            doc["score"], abs=1e-9
        )
        assert doc["label"] == labels[doc["document"] - 1]
    text = runner.invoke(
        app, ["explain", "--model", str(version_dir), "--data", str(data), "--query", "2003"]
    ).stdout
    assert "other features" in text and "label" in text


@pytest.mark.parametrize("labels", ["absent", "nan", "too_large", "text"])
def test_data_without_usable_labels_is_explained(
    runner: CliRunner, version_dir: Path, tmp_path: Path, labels: str
) -> None:
    frame = _frame()
    expected = _explain_frame(runner, version_dir, tmp_path / "labelled.parquet", frame)
    if labels == "absent":
        frame = frame.drop(columns="label")
    else:
        value = {"nan": np.nan, "too_large": 40, "text": "x"}[labels]
        frame["label"] = frame["label"].astype(str if labels == "text" else float)
        frame.loc[7, "label"] = value
    data = tmp_path / "unlabelled.parquet"
    got = _explain_frame(runner, version_dir, data, frame)
    assert [d["score"] for d in got["documents"]] == [d["score"] for d in expected["documents"]]
    assert all(d["label"] is None for d in got["documents"])
    pair = _explain(runner, version_dir, data, "--query", "2001", "--pair", "1,2")
    assert pair["a"]["label"] is None and pair["difference"] is not None
    html = tmp_path / "why.html"
    overall = _explain(runner, version_dir, data, "--out", str(html), "--rows", "40")
    assert overall["rows"] == 40 and html.is_file()


def _explain_frame(
    runner: CliRunner, model: Path, data: Path, frame: pd.DataFrame
) -> dict[str, Any]:
    frame.to_parquet(data)
    return _explain(runner, model, data, "--query", "2001")


def test_errors_in_unlabelled_data_name_the_file_given(
    runner: CliRunner, version_dir: Path, tmp_path: Path
) -> None:
    frame = _frame().drop(columns="label")
    frame["f4"] = frame["f4"].astype(str)
    data = tmp_path / "bad.parquet"
    frame.to_parquet(data)
    args = ["explain", "--model", str(version_dir), "--data", str(data), "--query", "2001"]
    line = one_error_line(runner.invoke(app, args).stderr)
    assert line.startswith(f"error: {data}: ") and "column 'f4': has type" in line
