"""Parquet reader and writer: round trip, names, side columns and errors with row and column."""

from __future__ import annotations

from decimal import Decimal as D
from pathlib import Path

import numpy as np
import pandas
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trainer.data.dataset import RankingDataset
from trainer.data.errors import DataFormatError
from trainer.data.parquet import read_parquet, write_parquet
from trainer.data.parquet_files import feature_columns, survey_file


def sample() -> RankingDataset:
    return RankingDataset(
        features=np.array([[1, np.nan], [2, 0.5], [3, -1]], dtype=np.float32),
        labels=np.array([1.0, 0.0, 2.0]),
        group_offsets=np.array([0, 2, 3], dtype=np.int64),
        query_ids=np.array([10, 4], dtype=np.int64),
        feature_names=["bm25", "ctr"],
        user_ids=np.array(["u1", "u2"]),
        positions=np.array([1, 2, 1], dtype=np.int64),
    )


def test_round_trip(tmp_path: Path) -> None:
    write_parquet(sample(), tmp_path / "d.parquet")
    back = read_parquet(tmp_path / "d.parquet")
    original = sample()
    np.testing.assert_array_equal(back.features, original.features)
    assert back.features.dtype == np.float32 and back.features.flags.c_contiguous
    np.testing.assert_array_equal(back.labels, original.labels)
    np.testing.assert_array_equal(back.group_offsets, original.group_offsets)
    np.testing.assert_array_equal(back.query_ids, original.query_ids)
    assert back.feature_names == ["bm25", "ctr"]
    assert back.user_ids is not None and back.user_ids.tolist() == ["u1", "u2"]
    assert back.positions is not None and back.positions.tolist() == [1, 2, 1]


def test_column_order_names_and_types_are_kept(tmp_path: Path) -> None:
    table = pa.table(
        {
            "z_last": pa.array([1, 2, None], pa.int64()),
            "qid": pa.array(["q1", "q1", "q2"]),
            "flag": pa.array([True, False, True]),
            "label": pa.array([0, 1, 2], pa.int32()),
        }
    )
    pq.write_table(table, tmp_path / "d.pq")
    data = read_parquet(tmp_path / "d.pq")
    assert data.feature_names == ["z_last", "flag"]
    np.testing.assert_array_equal(data.features, [[1, 1], [2, 0], [np.nan, 1]])
    assert data.query_ids.tolist() == ["q1", "q2"]
    assert data.user_ids is None and data.positions is None


def write_table(tmp_path: Path, **columns: list[object]) -> Path:
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table(columns), path)
    return path


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ({"qid": [1, 1], "f": [1.0, 2.0]}, r"no 'label' column \(columns: qid, f\)"),
        ({"label": [1, 1], "f": [1.0, 2.0]}, r"no 'qid' column"),
        ({"qid": [1, 1], "label": [1.0, None]}, r"row 2, column 'label': missing or not a fin"),
        ({"qid": [1, 1], "label": [1.0, float("inf")]}, r"row 2, column 'label'"),
        ({"qid": [1, 1], "label": [1, -2]}, r"row 2, column 'label': -2 is negative"),
        ({"qid": [1, 1], "label": ["a", "b"]}, r"column 'label': has type string, expected"),
        ({"qid": [1, 1], "label": [1, 0], "name": ["a", "b"]}, r"column 'name': has type str"),
        (
            {"qid": [1, 2, 1], "label": [1, 0, 1]},
            r"row 3, column 'qid': qid 1 reappears after another query "
            r"\(first seen at row 1\); queries must be contiguous",
        ),
        ({"qid": [1, None], "label": [1, 0]}, r"row 2, column 'qid': null"),
        # It read "row 3: qid 10078.0 reappears", a row past the fault.
        (
            {"qid": [10078.0, 10078.5, 10078.0], "label": [1, 0, 1]},
            r"row 2, column 'qid': 10078.5 is not a whole number",
        ),
        (
            {"qid": pa.array([D("1"), D("1.5"), D("1")], pa.decimal128(5, 1)), "label": [1, 0, 1]},
            r"row 2, column 'qid': 1.5 is not a whole number",
        ),
        (
            {"qid": pa.array([1.0, float("nan"), float("nan")]), "label": [1, 0, 1]},
            r"row 2, column 'qid': NaN or infinite",
        ),
        (
            {"qid": [1, 1], "label": [1, 0], "user_id": ["a", "b"]},
            r"row 2, column 'user_id': changes within a query",
        ),
        (
            {"qid": [1, 1], "label": [1, 0], "position": [1, 0]},
            r"row 2, column 'position': not a positive integer",
        ),
        ({"qid": pa.array([], pa.int64()), "label": pa.array([], pa.int64())}, "no data rows"),
    ],
)
def test_errors_name_file_row_and_column(
    tmp_path: Path, columns: dict[str, list[object]], message: str
) -> None:
    path = write_table(tmp_path, **columns)
    with pytest.raises(DataFormatError, match=r"bad\.parquet: " + message):
        read_parquet(path)


def test_not_parquet_and_missing(tmp_path: Path) -> None:
    (tmp_path / "x.parquet").write_text("1 qid:1 1:1\n")
    with pytest.raises(DataFormatError, match=r"x\.parquet: not a readable Parquet file"):
        read_parquet(tmp_path / "x.parquet")
    with pytest.raises(DataFormatError, match="no such file"):
        read_parquet(tmp_path / "absent.parquet")


def test_reserved_feature_names_are_refused(tmp_path: Path) -> None:
    data = sample()
    clash = RankingDataset(data.features, data.labels, data.group_offsets, data.query_ids,
                           feature_names=["label", "x"])  # fmt: skip
    with pytest.raises(DataFormatError, match="reserved"):
        write_parquet(clash, tmp_path / "d.parquet")


def test_a_text_column_is_refused_saying_what_a_feature_is(tmp_path: Path) -> None:
    path = tmp_path / "d.parquet"
    pq.write_table(
        pa.table({"qid": [1, 1], "label": [1, 0], "doc_id": ["a", "b"], "x": [1, 2]}), path
    )
    with pytest.raises(DataFormatError, match=r"column 'doc_id': has type string, expected a "
                       r"number \(a feature is a number: leave an id"):  # fmt: skip
        read_parquet(path)


def test_a_text_label_column_is_refused_saying_what_a_label_is(tmp_path: Path) -> None:
    """The feature hint was given for the label too (a trial)."""
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"qid": [1, 1], "label": ["good", "bad"], "x": [1, 2]}), path)
    with pytest.raises(DataFormatError, match=r"column 'label': .* \(a relevance grade") as info:
        read_parquet(path)
    assert "feature" not in str(info.value)


def test_a_pandas_row_index_is_not_a_feature(tmp_path: Path) -> None:
    frame = pandas.DataFrame(
        {"qid": [1, 1, 2, 2], "label": [0, 1, 2, 0], "bm25": [0.5, 1.5, 2.5, 3.5]}
    )
    # Filtered rows keep their labels (0, 2, 3): pandas writes them as `__index_level_0__`.
    frame[frame.bm25 != 1.5].to_parquet(tmp_path / "filtered.parquet")
    assert "__index_level_0__" in pq.read_schema(tmp_path / "filtered.parquet").names
    data = read_parquet(tmp_path / "filtered.parquet")
    assert data.feature_names == ["bm25"]
    np.testing.assert_array_equal(data.features[:, 0], [0.5, 2.5, 3.5])
    # The cluster engine's survey (run on Dask workers) leaves it out too.
    survey = survey_file(str(tmp_path / "filtered.parquet"), partition_rows=10)
    assert feature_columns(survey.columns) == ["bm25"]
    # A named index is the user's own column (an item id, say): kept.
    frame.set_index("bm25").to_parquet(tmp_path / "named.parquet")
    assert read_parquet(tmp_path / "named.parquet").feature_names == ["bm25"]


def test_a_column_named_like_a_row_index_without_pandas_metadata_is_a_feature(
    tmp_path: Path,
) -> None:
    table = pa.table({"qid": [1, 1], "label": [0, 1], "__index_level_0__": [5.0, 6.0]})
    pq.write_table(table, tmp_path / "d.parquet")
    assert read_parquet(tmp_path / "d.parquet").feature_names == ["__index_level_0__"]


def test_a_decimal_column_is_a_number(tmp_path: Path) -> None:
    """It was refused as "has type decimal128(10, 2), expected a number"."""
    import decimal

    prices = pa.array(
        [decimal.Decimal("1.25"), None, decimal.Decimal("-3.50")], pa.decimal128(10, 2)
    )
    path = write_table(tmp_path, qid=[1, 1, 1], label=[1, 0, 2], price=prices)
    data = read_parquet(path)
    assert data.feature_names == ["price"]
    np.testing.assert_array_equal(data.features[:, 0], np.array([1.25, np.nan, -3.5], np.float32))


def test_whole_decimal_qids_are_query_ids(tmp_path: Path) -> None:
    qids = pa.array([D("7.0"), D("7.0"), D("9.0")], pa.decimal128(5, 1))
    data = read_parquet(write_table(tmp_path, qid=qids, label=[1, 0, 1], f=[0.5, 0.25, 1.0]))
    assert data.query_ids.tolist() == [7, 9] and data.group_offsets.tolist() == [0, 2, 3]
