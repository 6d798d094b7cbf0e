"""An item feature table: one row per item, an id column and numeric feature columns.

Read from Parquet (`--items items.parquet`); ids are kept as strings (an integer id 17 and the
string "17" are the same item, as they are in a request). Rows in error messages are 1-based.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.features.item_snapshot import ItemSnapshot
from trainer.data.errors import DataFormatError, located
from trainer.features.item_columns import check_feature_names, feature_values, item_ids


@dataclass(frozen=True)
class ItemTable:
    ids: np.ndarray  # unicode [n_items], unique
    matrix: np.ndarray  # float32 [n_items, n_features], NaN = missing
    names: list[str]
    source: str = ""

    def __post_init__(self) -> None:
        if self.matrix.shape != (self.ids.shape[0], len(self.names)):
            raise ValueError("item ids, feature rows and names do not line up")

    def version(self) -> str:
        """A content id (same table → same set version): `v` + 16 hex of sha256."""
        digest = hashlib.sha256()
        digest.update("\x1f".join(self.names).encode())
        order = np.argsort(self.ids, kind="stable")
        digest.update(np.ascontiguousarray(self.ids[order]).tobytes())
        digest.update(np.ascontiguousarray(self.matrix[order], dtype="<f4").tobytes())
        return "v" + digest.hexdigest()[:16]


def read_item_table(path: str | Path, id_column: str = "doc_id") -> ItemTable:
    """Read a Parquet item table; every column but `id_column` is a numeric feature."""
    from trainer.data.parquet import open_table

    path = Path(path)
    if path.is_dir():
        raise located(path, None, "is a directory; an item table is one Parquet file")
    table = open_table(path)  # refuses repeated column names too
    names = table.column_names
    if id_column not in names:
        raise located(path, None, f"no id column {id_column!r} (columns: {', '.join(names)})")
    feature_names = [n for n in names if n != id_column]
    if not feature_names:
        raise located(path, None, "no feature columns beside the id column")
    check_feature_names(path, feature_names)
    if table.num_rows == 0:
        # Pushed, an empty table went live as a set of 0 items: every item then missing.
        raise located(path, None, "no item rows")
    ids = item_ids(path, table, id_column)
    matrix = np.empty((table.num_rows, len(feature_names)), dtype=np.float32)
    for j, name in enumerate(feature_names):
        matrix[:, j] = feature_values(path, table, name)
    _check_unique(path, ids, id_column)
    return ItemTable(ids, matrix, feature_names, str(path))


def _check_unique(path: Path, ids: np.ndarray, id_column: str) -> None:
    if ids.size < 2:
        return
    order = np.argsort(ids, kind="stable")
    dup = np.flatnonzero(ids[order][1:] == ids[order][:-1])
    if dup.size:
        first, second = sorted((int(order[dup[0]]), int(order[dup[0] + 1])))
        raise DataFormatError(
            f"{path}: row {second + 1}, column {id_column!r}: item id {str(ids[second])!r} "
            f"repeats row {first + 1}"
        )


def as_snapshot(table: ItemTable) -> ItemSnapshot:
    """The table as the service's in-memory snapshot (rows sorted by id), for lookups that
    behave exactly as serving does."""
    order = np.argsort(table.ids, kind="stable")
    matrix = np.ascontiguousarray(table.matrix[order])
    return ItemSnapshot(np.ascontiguousarray(table.ids[order]), matrix, table.names)


def table_from_version(directory: str | Path) -> ItemTable:
    """The item snapshot a model version directory carries, verified, as a table."""
    from app.artifacts.store import load_version

    artifact = load_version(Path(directory))
    items = artifact.manifest.item_features
    if items is None or not items.has_snapshot:
        raise DataFormatError(f"{directory}: the model carries no item feature snapshot")
    snapshot = ItemSnapshot.load(artifact.path, items)
    source = f"{directory} ({items.set}@{items.version})"
    return ItemTable(np.asarray(snapshot.ids), np.asarray(snapshot.matrix), snapshot.names, source)
