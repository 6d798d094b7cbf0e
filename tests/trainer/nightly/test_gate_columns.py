"""The gate scores the deployed model on the candidate's held-out rows: by column name, with
the deployed model's item features joined by document id when the rows lack them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from app.artifacts.store import Artifact, load_version
from app.scoring.loader import load_scorer
from tests.support.item_data import write_sourced_data
from trainer.cli import app
from trainer.data.model_rows import load_model_rows
from trainer.dataset_scoring import score_dataset
from trainer.metrics.report import ranking_report
from trainer.nightly.config import GateConfig
from trainer.nightly.gate import run_gate

FAST = ["--num-trees", "8", "--num-leaves", "7", "--threads", "1"]


@pytest.fixture(scope="module")
def versions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Three versions on the same data: with items; with items and the data's columns in
    another order; without items. And the validation file."""
    root = tmp_path_factory.mktemp("gate")
    train, valid, items = write_sourced_data(root, n_queries=30)
    reordered = root / "reordered.parquet"
    columns = ["qid", "label", "doc_id", "query_length", "title_match", "bm25"]
    pq.write_table(pq.read_table(train).select(columns), reordered)
    out = {"valid": valid}
    for name, data, extra in (
        ("items", train, ["--items", str(items)]),
        ("reordered", reordered, ["--items", str(items)]),
        ("plain", train, []),
    ):
        out[name] = root / name
        args = ["train", "--train", str(data), "--out", str(out[name]), *FAST, *extra]
        result = CliRunner().invoke(app, [*args, "--query-features", "query_length"])
        assert result.exit_code == 0, result.stderr
    return out


def _served_report(artifact: Artifact, valid: Path) -> dict[str, float]:
    """The metrics of the version on `valid`, its rows assembled as `ltr evaluate` does."""
    rows = load_model_rows(artifact, valid).data
    scores = load_scorer(artifact).score(rows.features)
    return ranking_report(scores, rows.labels, rows.group_offsets)


def test_deployed_columns_in_another_order_are_matched_by_name(
    versions: dict[str, Path],
) -> None:
    candidate, deployed = load_version(versions["items"]), load_version(versions["reordered"])
    assert candidate.manifest.feature_names != deployed.manifest.feature_names
    assert len(candidate.manifest.feature_names) == len(deployed.manifest.feature_names)
    holdout = load_model_rows(candidate, versions["valid"]).data
    result = run_gate(candidate, deployed, holdout, GateConfig(tolerance=1.0))
    assert result.deployed is not None
    expected = _served_report(deployed, versions["valid"])
    assert result.deployed["ndcg@10"] == pytest.approx(expected["ndcg@10"], abs=1e-9)
    assert result.deployed["err@10"] == pytest.approx(expected["err@10"], abs=1e-9)


def test_deployed_item_features_are_joined_from_its_snapshot(versions: dict[str, Path]) -> None:
    candidate, deployed = load_version(versions["plain"]), load_version(versions["items"])
    holdout = load_model_rows(candidate, versions["valid"]).data
    assert holdout.doc_ids is not None and "price" not in holdout.names()
    result = run_gate(candidate, deployed, holdout, GateConfig(tolerance=1.0))
    assert result.deployed is not None, result.notes  # was: "not comparable"
    expected = _served_report(deployed, versions["valid"])
    assert result.deployed["ndcg@10"] == pytest.approx(expected["ndcg@10"], abs=1e-9)
    rows = load_model_rows(deployed, versions["valid"]).data
    served = load_scorer(deployed).score(rows.features)
    np.testing.assert_allclose(score_dataset(deployed, holdout), served, rtol=0, atol=1e-12)


def test_rows_without_ids_or_columns_are_not_comparable(versions: dict[str, Path]) -> None:
    candidate, deployed = load_version(versions["plain"]), load_version(versions["items"])
    holdout = replace(load_model_rows(candidate, versions["valid"]).data, doc_ids=None)
    # Fail closed: a candidate the deployed model cannot be compared with is refused...
    result = run_gate(candidate, deployed, holdout, GateConfig(tolerance=1.0))
    assert not result.passed and result.deployed is None
    (reason,) = result.reasons
    assert "missing feature columns: price, ctr, popularity" in reason
    assert "gate.allow_feature_change" in reason
    # ...unless the operator opts in, and then the report says it was not compared.
    allowed = run_gate(candidate, deployed, holdout, GateConfig(allow_feature_change=True))
    assert allowed.passed and allowed.deployed is None and not allowed.reasons
    assert any("missing feature columns: price, ctr, popularity" in n for n in allowed.notes)


def test_a_deployed_model_that_does_not_load_refuses_unless_allowed(
    versions: dict[str, Path],
) -> None:
    candidate = load_version(versions["plain"])
    holdout = load_model_rows(candidate, versions["valid"]).data
    broken = "default/v1: model.json: sha256 mismatch"
    result = run_gate(candidate, None, holdout, GateConfig(), deployed_error=broken)
    assert not result.passed
    assert "does not load" in result.reasons[0] and broken in result.reasons[0]
    allowed = run_gate(
        candidate, None, holdout, GateConfig(allow_broken_deployed=True), deployed_error=broken
    )
    assert allowed.passed and any(broken in n for n in allowed.notes)
