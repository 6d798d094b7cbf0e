"""`ltr train --items` says how many documents the item table lacks (and trains on), and a query
feature that names an item column, the query id, the label or the id column says which it is."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner, Result

from trainer.cli import app

FAST = ["--num-trees", "2", "--num-leaves", "3", "--min-data-in-leaf", "1", "--threads", "1"]


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    """Training data of 8 documents (4 queries) and an item table with half of them."""
    data = tmp_path / "train.parquet"
    columns = {
        "qid": [1, 1, 2, 2, 3, 3, 4, 4],
        "label": [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0],
        "doc_id": [f"d{i}" for i in range(8)],
        "bm25": [1.0, 0.5, 0.2, 0.9, 0.7, 0.1, 0.3, 0.8],
        "query_length": [2.0, 2.0, 3.0, 3.0, 1.0, 1.0, 4.0, 4.0],
    }
    pq.write_table(pa.table(columns), data)
    items = tmp_path / "items.parquet"
    pq.write_table(
        pa.table({"doc_id": ["d0", "d2", "d4", "d6"], "price": [1.0, 2.0, 3.0, 4.0]}), items
    )
    return data, items


def train(tmp_path: Path, data: Path, items: Path, *extra: str) -> Result:
    args = ["train", "--train", str(data), "--items", str(items), "--out", str(tmp_path / "m")]
    return CliRunner().invoke(app, [*args, *FAST, *extra])


def test_documents_the_items_lack_are_a_warning_and_training_goes_on(
    tmp_path: Path, files: tuple[Path, Path]
) -> None:
    data, items = files
    result = train(tmp_path, data, items, "--json")
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[0] == (  # then the training progress
        f"warning: {data}: 4 of 8 documents (50.0%) are not in the item table {items}; "
        "their item features are missing (NaN)"
    )
    summary = json.loads(result.stdout)
    assert summary["model_dir"] == str(tmp_path / "m")
    assert summary["item_coverage"] == [
        {
            "file": str(data),
            "item_table": str(items),
            "documents": 8,
            "missing": 4,
            "missing_share": 0.5,
        }
    ]


def test_no_warning_when_the_items_cover_every_document(
    tmp_path: Path, files: tuple[Path, Path]
) -> None:
    data, _ = files
    items = tmp_path / "all.parquet"
    pq.write_table(pa.table({"doc_id": [f"d{i}" for i in range(8)], "price": [1.0] * 8}), items)
    result = train(tmp_path, data, items, "--json")
    assert result.exit_code == 0, result.output
    assert "warning" not in result.stderr
    assert json.loads(result.stdout)["item_coverage"][0]["missing"] == 0


def test_an_item_column_as_a_query_feature_says_it_is_an_item_feature(
    tmp_path: Path, files: tuple[Path, Path]
) -> None:
    """It named `train.parquet: row 2, column 'price'`, a column the data does not have."""
    data, items = files
    result = train(tmp_path, data, items, "--query-features", "query_length,price")
    assert result.exit_code == 2
    assert result.stderr.startswith(
        f"error: query feature 'price' is an item feature (a column of the item table {items}), "
        f"not a query column of {data}"
    )
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("name", "role"),
    [
        ("qid", "the query id column"),
        ("label", "the relevance label column"),
        ("doc_id", "the document id column (--id-column)"),
    ],
)
def test_a_reserved_column_as_a_query_feature_says_what_it_is(
    tmp_path: Path, files: tuple[Path, Path], name: str, role: str
) -> None:
    """`qid` was "no query feature column 'qid'" although the file has it."""
    data, items = files
    result = train(tmp_path, data, items, "--query-features", name)
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {data}: column {name!r} is {role} and cannot be a query feature\n"
    )
    assert not (tmp_path / "m").exists()


def test_a_real_query_column_still_trains(tmp_path: Path, files: tuple[Path, Path]) -> None:
    data, items = files
    result = train(tmp_path, data, items, "--query-features", "query_length")
    assert result.exit_code == 0, result.output
