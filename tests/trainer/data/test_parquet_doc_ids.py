"""The training data's own document id column (`ltr train --items`) is read as the item table's
is: nested types, NUL characters and repeated column names are one clear line, no traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from trainer.cli import app
from trainer.data.errors import DataFormatError
from trainer.data.parquet import read_parquet


def training_file(path: Path, ids: Any) -> Path:
    columns = {"qid": [1, 1], "label": [1.0, 0.0], "doc_id": ids, "bm25": [1.0, 2.0]}
    pq.write_table(pa.table(columns), path)
    return path


def refusal(tmp_path: Path, data: Path) -> str:
    """The one-line error `ltr train --items` prints for `data`."""
    items = tmp_path / "items.parquet"
    pq.write_table(pa.table({"doc_id": ["a", "b"], "price": [1.0, 2.0]}), items)
    args = ["train", "--train", str(data), "--items", str(items), "--out", str(tmp_path / "m")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.output, result.output
    return result.stderr.strip()


@pytest.mark.parametrize(
    ("ids", "kind"),
    [
        (pa.array([[1], [2]]), "list<element: int64>"),
        (pa.array([{"a": 1}, {"a": 2}]), "struct"),
        # Before: pushed as items "1" and "nan" (a NaN is no null), or "0.5", "1e+20".
        (pa.array([1.0, float("nan")]), "double"),
        (pa.array([True, False]), "bool"),
    ],
)
def test_an_id_column_of_another_type_is_refused(tmp_path: Path, ids: pa.Array, kind: str) -> None:
    data = training_file(tmp_path / "train.parquet", ids)
    message = refusal(tmp_path, data)
    assert message.startswith(f"error: {data}: column 'doc_id': has type {kind}")
    assert message.endswith("expected text or integers")


def test_an_id_with_a_nul_character_is_refused(tmp_path: Path) -> None:
    """numpy's unicode arrays drop the trailing NUL: "b\\x00" trained as item "b"."""
    data = training_file(tmp_path / "train.parquet", ["a", "b\x00"])
    assert refusal(tmp_path, data) == (
        f"error: {data}: row 2, column 'doc_id': item id contains a NUL character"
    )
    inner = training_file(tmp_path / "inner.parquet", ["a\x00b", "c"])
    with pytest.raises(DataFormatError, match=r"row 1, column 'doc_id': .* NUL"):
        read_parquet(inner, id_column="doc_id")


def test_integer_ids_are_text_and_nulls_name_the_row(tmp_path: Path) -> None:
    data = read_parquet(training_file(tmp_path / "ints.parquet", [17, 18]), id_column="doc_id")
    assert data.doc_ids is not None and data.doc_ids.tolist() == ["17", "18"]
    nulls = training_file(tmp_path / "nulls.parquet", ["a", None])
    with pytest.raises(DataFormatError, match=r"row 2, column 'doc_id': null item id"):
        read_parquet(nulls, id_column="doc_id")


def test_duplicate_column_names_are_one_line(tmp_path: Path) -> None:
    columns = [pa.array([1, 1]), pa.array([1.0, 0.0]), pa.array(["a", "b"])]
    columns += [pa.array([1.0, 2.0]), pa.array([3.0, 4.0])]
    names = ["qid", "label", "doc_id", "bm25", "bm25"]
    data = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_arrays(columns, names=names), data)
    assert refusal(tmp_path, data) == f"error: {data}: duplicate column names"
    with pytest.raises(DataFormatError, match=r"train\.parquet: duplicate column names$"):
        read_parquet(data)
