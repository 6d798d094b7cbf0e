"""`ltr train` with feature sources: query columns and an item table joined by document id."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from app.artifacts.store import load_version
from app.features.item_snapshot import ItemSnapshot
from tests.support.item_data import CANDIDATE_NAMES, ITEM_NAMES, write_sourced_data
from trainer.cli import app
from trainer.features.item_table import read_item_table

FAST = ["--num-trees", "8", "--num-leaves", "7", "--threads", "1"]


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    return write_sourced_data(tmp_path_factory.mktemp("data"))


def _train(runner: CliRunner, out: Path, *extra: str) -> object:
    return runner.invoke(app, ["train", "--out", str(out), *FAST, "--json", *extra])


def test_items_and_query_columns_are_recorded(runner: CliRunner, tmp_path: Path, data) -> None:
    train, valid, items = data
    out = tmp_path / "models" / "v1"
    args = ["--train", str(train), "--valid", str(valid), "--items", str(items)]
    result = _train(runner, out, *args, "--query-features", "query_length", "--item-set", "cat")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["model_dir"] == str(out)
    artifact = load_version(out)
    m = artifact.manifest
    assert m.feature_names == [*CANDIDATE_NAMES, "query_length", *ITEM_NAMES]
    assert m.candidate_feature_names == CANDIDATE_NAMES
    assert m.names_from("query") == ["query_length"] and m.names_from("item") == ITEM_NAMES
    assert m.item_features is not None and m.item_features.set == "cat"
    table = read_item_table(items)
    assert m.item_features.version == table.version()
    assert {"items.npy", "item_ids.npy"} <= set(m.files)  # sha256-verified like the model
    snapshot = ItemSnapshot.load(out, m.item_features)
    rows, found = snapshot.lookup(table.ids.tolist(), np.arange(len(ITEM_NAMES)))
    assert found.all() and np.array_equal(rows, table.matrix)
    assert not (out.parent / ".v1.staging").exists()  # the staging copy is gone


def test_spec_file_is_the_same_as_flags(runner: CliRunner, tmp_path: Path, data) -> None:
    train, _, items = data
    spec = tmp_path / "features.toml"
    spec.write_text(
        f'query = ["query_length"]\n[item]\ntable = "{items}"\nset = "cat"\nid_column = "doc_id"\n'
    )
    out = tmp_path / "v2"
    result = _train(runner, out, "--train", str(train), "--features-spec", str(spec))
    assert result.exit_code == 0, result.output
    m = load_version(out).manifest
    assert m.source("query_length") == "query" and m.source("price") == "item"


def test_a_query_column_that_varies_within_a_query_names_the_row(
    runner: CliRunner, tmp_path: Path, data
) -> None:
    train, _, _ = data
    result = _train(runner, tmp_path / "v3", "--train", str(train), "--query-features", "bm25")
    assert result.exit_code == 2
    assert f"{train}: row 2, column 'bm25': a query feature must be the same" in result.stderr


def test_an_item_column_also_in_the_data_is_refused(
    runner: CliRunner, tmp_path: Path, data
) -> None:
    train, _, _ = data
    clash = tmp_path / "items.parquet"
    pq.write_table(pa.table({"doc_id": ["item-1"], "bm25": [1.0]}), clash)
    result = _train(runner, tmp_path / "v4", "--train", str(train), "--items", str(clash))
    assert result.exit_code == 2
    assert "columns ['bm25'] are also in the item table" in result.stderr


def test_an_item_table_that_shares_no_id_with_the_data_is_refused(
    runner: CliRunner, tmp_path: Path, data
) -> None:
    """It trained, every item feature missing: integer ids where the data has "doc-..." ones."""
    train, _, items = data
    ids = read_item_table(items).ids
    other = tmp_path / "items.parquet"
    pq.write_table(pa.table({"doc_id": list(range(len(ids))), "price": [1.0] * len(ids)}), other)
    result = _train(runner, tmp_path / "v5", "--train", str(train), "--items", str(other))
    assert result.exit_code == 2
    assert f"is in the item table {other} (its ids look like " in result.stderr
    assert "the table's like '0'): check --id-column" in result.stderr
    assert not (tmp_path / "v5").exists()


def test_duplicate_item_ids_name_both_rows(tmp_path: Path) -> None:
    path = tmp_path / "items.parquet"
    pq.write_table(pa.table({"doc_id": ["a", "b", "a"], "x": [1.0, 2.0, 3.0]}), path)
    with pytest.raises(ValueError, match=r"row 3, column 'doc_id': item id 'a' repeats row 1"):
        read_item_table(path)


def test_table_version_is_its_content(tmp_path: Path) -> None:
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    pq.write_table(pa.table({"doc_id": ["x", "y"], "f": [1.0, 2.0]}), a)
    pq.write_table(pa.table({"doc_id": ["y", "x"], "f": [2.0, 1.0]}), b)  # same rows, reordered
    assert read_item_table(a).version() == read_item_table(b).version()
    pq.write_table(pa.table({"doc_id": ["y", "x"], "f": [2.0, 1.5]}), b)
    assert read_item_table(a).version() != read_item_table(b).version()
