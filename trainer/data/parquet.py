"""Parquet ranking data: columns `qid`, `label`, optional `user_id` and `position`, and every
other column a numeric feature (column order and names kept). Rows in error messages are
1-based."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from trainer.data.dataset import RankingDataset
from trainer.data.errors import DataFormatError, clip, first_bad_label, located
from trainer.data.float32 import BEYOND_FLOAT32, to_float32

if TYPE_CHECKING:
    import pyarrow as pa

# `click`: logged clicks (ltr simulate --clicks) sit beside the labels, never among the features.
RESERVED = ("qid", "label", "user_id", "position", "click")
_ROW_LABELS = re.compile(r"__index_level_\d+__")


def is_numeric(kind: pa.DataType) -> bool:
    """Whether a column of Arrow type `kind` reads as numbers: integers, floats, booleans, or
    `null`, the type pyarrow gives a column whose every value is None (all missing, as a
    float column of NaN is), or decimals (read as float64, then float32 as every feature)."""
    import pyarrow as pa

    return (
        pa.types.is_integer(kind)
        or pa.types.is_floating(kind)
        or pa.types.is_boolean(kind)
        or pa.types.is_null(kind)
        or pa.types.is_decimal(kind)  # refused as "expected a number" (a trial's prices)
    )


def _at(path: str | Path, row: int | None, column: str, what: str) -> DataFormatError:
    where = f"row {row}, column {column!r}" if row is not None else f"column {column!r}"
    return DataFormatError(f"{path}: {where}: {what}")


def _first(mask: np.ndarray) -> int:
    """1-based row of the first True."""
    return int(np.flatnonzero(mask)[0]) + 1


def read_parquet(path: str | Path, id_column: str | None = None) -> RankingDataset:
    """Read a Parquet file into a query-grouped dataset (queries must be contiguous).

    `id_column`: a document id column (kept as strings in `doc_ids`, not a feature)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    path = Path(path)
    table = open_table(path)
    names = table.column_names
    for required in ("qid", "label"):
        if required not in names:
            raise located(path, None, f"no {required!r} column (columns: {', '.join(names)})")
    if table.num_rows == 0:
        raise located(path, None, "no data rows")
    if id_column is not None and id_column not in names:
        raise located(path, None, f"no document id column {id_column!r}")
    feature_names = [name for name in names if name not in RESERVED and name != id_column]

    def numeric(name: str) -> np.ndarray:
        column = table.column(name)
        kind = column.type
        if not is_numeric(kind):
            hint = ""
            if name == "label":
                hint = " (a relevance grade: 0, 1, 2, ...; map text grades to numbers first)"
            elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
                # A trial's doc_id column stopped `ltr train` here, where `ltr evaluate`
                # (reading only the model's columns) ignored it.
                hint = (
                    " (a feature is a number: leave an id or other text column out of the "
                    "file, unless it is the document id column that joins an --items table)"
                )
            raise _at(path, None, name, f"has type {kind}, expected a number{hint}")
        cast = pc.cast(column, pa.float64(), safe=False).fill_null(np.nan)
        return np.asarray(cast.to_numpy(), dtype=np.float64)

    labels = numeric("label")
    if not np.all(np.isfinite(labels)):
        raise _at(path, _first(~np.isfinite(labels)), "label", "missing or not a finite number")
    bad_label = first_bad_label(labels)
    if bad_label is not None:
        raise _at(path, bad_label[0] + 1, "label", bad_label[1])
    features = np.empty((table.num_rows, len(feature_names)), dtype=np.float32)
    for j, name in enumerate(feature_names):
        wide = numeric(name)
        features[:, j], overflow = to_float32(wide)
        if overflow.any():
            row = _first(overflow)
            raise _at(path, row, name, f"{wide[row - 1]:g} {BEYOND_FLOAT32}")
    qid_column = table.column("qid")
    if qid_column.null_count:
        raise _at(path, _first(qid_column.is_null().to_numpy(zero_copy_only=False)), "qid", "null")
    if pa.types.is_decimal(qid_column.type):
        qid_column = _whole_decimals(path, qid_column)
    qids = np.asarray(qid_column.to_numpy(zero_copy_only=False))
    if qids.dtype.kind == "f" and not np.all(np.isfinite(qids)):
        # NaN never equals itself: each such row became a query of its own, then "reappeared".
        raise _at(path, _first(~np.isfinite(qids)), "qid", "NaN or infinite; a query id is a value")
    if qids.dtype.kind == "f" and np.any(qids != np.round(qids)):
        # 10078.5 among 10078.0 rows was reported as "qid 10078.0 reappears" a row later.
        row = _first(qids != np.round(qids))
        raise _at(path, row, "qid", f"{float(qids[row - 1])!r} is not a whole number")
    offsets, query_ids = query_runs(path, qids)
    user_ids = _user_ids(path, table, offsets) if "user_id" in names else None
    positions = _positions(path, numeric("position")) if "position" in names else None
    # Last, so a bad value is still reported first. A model needs a feature (training crashed on
    # a pydantic error); with an id column, the item table joined later brings them.
    if not feature_names and id_column is None:
        raise located(path, None, no_feature_columns(names))
    return RankingDataset(
        features=features,
        labels=labels,
        group_offsets=offsets,
        query_ids=query_ids,
        feature_names=feature_names,
        source=str(path),
        user_ids=user_ids,
        positions=positions,
        doc_ids=None if id_column is None else _doc_ids(path, table, id_column),
        source_rows=np.arange(1, table.num_rows + 1, dtype=np.int64),
        source_unit="row",
    )


def no_feature_columns(names: list[str]) -> str:
    """What is wrong with a file whose columns are all reserved ones."""
    return (
        f"no feature columns (columns: {', '.join(names)}): every column but "
        f"{', '.join(RESERVED)} is a feature, and a model needs at least one"
    )


def _doc_ids(path: Path, table: pa.Table, id_column: str) -> np.ndarray:
    """The ids as the item table reads its own (they are joined to it): the same refusals of
    nulls, non-text types and NUL characters, the same messages."""
    # Imported here: item_columns imports this module (RESERVED).
    from trainer.features.item_columns import item_ids

    return item_ids(path, table, id_column)


def open_table(path: Path) -> pa.Table:
    """The whole Parquet file; DataFormatError naming it when missing, unreadable or with
    duplicate column names."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not path.is_file():
        raise located(path, None, "no such file")
    try:
        # The schema first: reading a file with a repeated column name fails with a
        # multi-line dump of the whole schema.
        names = pq.read_schema(path).names
        table = None if len(set(names)) != len(names) else pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise located(path, None, f"not a readable Parquet file ({exc})") from None
    if table is None:
        raise located(path, None, "duplicate column names")
    return table.drop_columns(row_label_columns(table.schema))


def row_label_columns(schema: pa.Schema) -> list[str]:
    """The columns holding a pandas DataFrame's unnamed index: pandas writes its row labels as
    `__index_level_N__` when they are not a plain range (after filtering, sampling or
    concatenating) and reads them back as the index. Read as features, they taught models the
    rows' positions and asked clients for them."""
    try:
        index = (schema.pandas_metadata or {}).get("index_columns", [])
    except ValueError:  # metadata that is not JSON: not pandas'
        return []
    return [
        name
        for name in index
        if isinstance(name, str) and _ROW_LABELS.fullmatch(name) and name in schema.names
    ]


def _whole_decimals(path: Path, column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A decimal qid column as int64; a row whose qid is not a whole number is named (numpy
    read decimals as objects, and 2.5 was a query of its own)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        return pc.cast(column, pa.int64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        values = column.to_pylist()
        row = next((i + 1 for i, v in enumerate(values) if v != v.to_integral_value()), None)
        what = (
            "beyond 64-bit integers" if row is None else f"{values[row - 1]} is not a whole number"
        )
        raise _at(path, row, "qid", what) from None


def query_runs(path: str | Path, qids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row offsets int64 [n_queries + 1], query ids [n_queries]) of the runs of equal `qids`;
    a qid that reappears after another query is an error naming `path` and the row."""
    starts = np.concatenate([[0], np.flatnonzero(qids[1:] != qids[:-1]) + 1])
    run_qids = qids[starts]
    _, first, inverse = np.unique(run_qids, return_index=True, return_inverse=True)
    repeated = np.flatnonzero(first[inverse] != np.arange(run_qids.size))
    if repeated.size:
        run = int(repeated[0])
        seen = int(starts[first[inverse[run]]]) + 1
        qid = clip(str(run_qids[run]))  # a long string qid is cut, not printed whole
        what = f"qid {qid} reappears after another query (first seen at row {seen})"
        raise _at(path, int(starts[run]) + 1, "qid", what + "; queries must be contiguous")
    return np.concatenate([starts, [qids.size]]).astype(np.int64), run_qids


def _user_ids(path: Path, table: pa.Table, offsets: np.ndarray) -> np.ndarray:
    column = table.column("user_id")
    users = np.asarray(column.to_numpy(zero_copy_only=False))
    if column.null_count:
        raise _at(path, _first(np.asarray(column.is_null().to_numpy())), "user_id", "null")
    per_row = np.repeat(users[offsets[:-1]], np.diff(offsets))
    if np.any(per_row != users):
        raise _at(path, _first(per_row != users), "user_id", "changes within a query")
    return users[offsets[:-1]]


def _positions(path: Path, positions: np.ndarray) -> np.ndarray:
    bad = ~np.isfinite(positions) | (positions < 1) | (positions != np.round(positions))
    if np.any(bad):
        raise _at(path, _first(bad), "position", "not a positive integer")
    return positions.astype(np.int64)


def write_parquet(dataset: RankingDataset, path: str | Path) -> None:
    """Write `qid`, `label`, the feature columns (named by `dataset.names()`) and, when the
    dataset has them, `user_id` and `position`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = dataset.names()
    clash = sorted(set(names) & set(RESERVED))
    if clash:
        raise DataFormatError(f"{path}: feature names clash with reserved columns: {clash}")
    sizes = dataset.group_sizes
    columns: dict[str, np.ndarray] = {
        "qid": np.repeat(dataset.query_ids, sizes),
        "label": dataset.labels,
    }
    for j, name in enumerate(names):
        columns[name] = dataset.features[:, j]
    if dataset.user_ids is not None:
        columns["user_id"] = np.repeat(dataset.user_ids, sizes)
    if dataset.positions is not None:
        columns["position"] = dataset.positions
    pq.write_table(pa.table(columns), path)
