"""Item tables refused with one clear line naming the file, the column and the row: odd id types,
NUL in ids, numbers float32 cannot hold, unusable column names, directories."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from trainer.cli import app
from trainer.data.errors import DataFormatError
from trainer.features.item_table import read_item_table


def write(path: Path, columns: dict[str, Any]) -> Path:
    pq.write_table(pa.table(columns), path)
    return path


def refusal(path: Path) -> str:
    """The one-line error `ltr features push` prints (it fails before reaching Redis)."""
    args = ["features", "push", "--set", "s", "--items", str(path)]
    result = CliRunner().invoke(app, [*args, "--redis-url", "redis://127.0.0.1:1/0"])
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.output
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
    path = write(tmp_path / "items.parquet", {"doc_id": ids, "x": [1.0, 2.0]})
    message = refusal(path)
    assert message.startswith(f"error: {path}: column 'doc_id': has type {kind}")
    assert message.endswith("expected text or integers")


def test_binary_ids_that_are_not_utf8_name_the_row(tmp_path: Path) -> None:
    path = write(tmp_path / "items.parquet", {"doc_id": [b"ok", b"\xff\xfe"], "x": [1.0, 2.0]})
    assert refusal(path) == (
        f"error: {path}: row 2, column 'doc_id': item id b'\\xff\\xfe' is not valid UTF-8 text"
    )
    good = write(tmp_path / "good.parquet", {"doc_id": [b"ok", b"fine"], "x": [1.0, 2.0]})
    assert read_item_table(good).ids.tolist() == ["ok", "fine"]


def test_an_id_with_a_nul_character_is_refused(tmp_path: Path) -> None:
    """numpy's unicode arrays dropped the trailing NUL: "a\\x00" became "a", "a duplicate"."""
    path = write(tmp_path / "items.parquet", {"doc_id": ["a", "a\x00"], "x": [1.0, 2.0]})
    assert (
        refusal(path) == f"error: {path}: row 2, column 'doc_id': item id contains a NUL character"
    )
    inner = write(tmp_path / "inner.parquet", {"doc_id": ["a\x00b", "c"], "x": [1.0, 2.0]})
    with pytest.raises(DataFormatError, match=r"row 1, column 'doc_id': .* NUL"):
        read_item_table(inner)


def test_a_number_beyond_float32_is_refused_an_infinity_kept(tmp_path: Path) -> None:
    big = write(tmp_path / "big.parquet", {"doc_id": ["a", "b"], "x": [1.0, -1e300]})
    assert refusal(big) == (
        f"error: {big}: row 2, column 'x': -1e+300 is beyond the range of float32 "
        "(about ±3.4e38), the type features are kept in"
    )
    inf = write(tmp_path / "inf.parquet", {"doc_id": ["a", "b"], "x": [1.0, float("inf")]})
    assert read_item_table(inf).matrix[1, 0] == np.inf
    diff = CliRunner().invoke(app, ["features", "diff", str(inf), str(big)])
    assert diff.exit_code == 2 and f"{big}: row 2, column 'x'" in diff.stderr  # not "identical"


@pytest.mark.parametrize("name", ["", "label", "qid", "user_id", "position", "click"])
def test_unusable_feature_names_are_refused(tmp_path: Path, name: str) -> None:
    path = write(tmp_path / "items.parquet", {"doc_id": ["a"], "x": [1.0], name: [2.0]})
    message = refusal(path)
    assert message.startswith(f"error: {path}: column {name!r}: ")
    assert ("empty column name" if not name else "reserved by the training data") in message


def test_duplicate_columns_and_directories_say_so(tmp_path: Path) -> None:
    columns = [pa.array(["a", "b"]), pa.array([1.0, 2.0]), pa.array([3.0, 4.0])]
    dup = tmp_path / "dup.parquet"
    pq.write_table(pa.Table.from_arrays(columns, names=["doc_id", "x", "x"]), dup)
    assert refusal(dup) == f"error: {dup}: duplicate column names"
    folder = tmp_path / "items.parquet.d"
    folder.mkdir()
    assert refusal(folder) == f"error: {folder}: is a directory; an item table is one Parquet file"


def test_train_refuses_a_bad_item_table_in_one_line(tmp_path: Path) -> None:
    data = write(
        tmp_path / "train.parquet",
        {"qid": [1, 1], "label": [0.0, 1.0], "doc_id": ["a", "b"], "bm25": [1.0, 2.0]},
    )
    items = write(tmp_path / "items.parquet", {"doc_id": pa.array([[1], [2]]), "x": [1.0, 2.0]})
    args = ["train", "--train", str(data), "--items", str(items), "--out", str(tmp_path / "m")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.startswith(f"error: {items}: column 'doc_id': has type list")


def test_a_column_of_nulls_only_is_a_feature_missing_for_every_item(tmp_path: Path) -> None:
    """pyarrow types a column whose every value is None `null`; it was refused as 'has type
    null, expected a number' where the same column of NaN was read."""
    path = write(
        tmp_path / "items.parquet",
        {"doc_id": ["a", "b"], "price": [1.5, 2.0], "fresh": pa.nulls(2)},
    )
    table = read_item_table(path, "doc_id")
    assert table.names == ["price", "fresh"]
    assert np.isnan(table.matrix[:, 1]).all() and table.matrix[:, 0].tolist() == [1.5, 2.0]
