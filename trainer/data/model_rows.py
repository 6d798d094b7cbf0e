"""A data file as the rows a model version scores.

The columns come out in the model's order. A model trained with item features (`ltr train
--items`) gets them joined by document id, from the item table given or else from the snapshot
the version carries, through the service's own snapshot lookup: an id the items lack gives NaN,
as serving does. Query columns must hold one value per query, as training demanded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from app.artifacts.store import Artifact
from app.features.item_snapshot import ItemSnapshot
from trainer.data.dataset import RankingDataset
from trainer.data.errors import DataFormatError
from trainer.data.loader import PARQUET_SUFFIXES, align_features, load_dataset
from trainer.features.item_table import as_snapshot, read_item_table
from trainer.features.sources import check_query_columns

# Without an item set the manifest names no id column: this one is skipped, as train skips it.
DEFAULT_ID_COLUMN = "doc_id"


@dataclass(frozen=True)
class ItemJoin:
    """Where a dataset's item features came from, and which documents the items lacked."""

    source: str
    id_column: str
    found: np.ndarray  # bool [n_docs]

    def summary(self, rows: slice | np.ndarray | None = None) -> dict[str, Any]:
        found = self.found if rows is None else self.found[rows]
        return {
            "source": self.source,
            "id_column": self.id_column,
            "documents": int(found.size),
            "missing": int(found.size - np.count_nonzero(found)),
        }

    def text(self, rows: slice | np.ndarray | None = None) -> str:
        s = self.summary(rows)
        return (
            f"{s['missing']} of {s['documents']} documents not in {s['source']} "
            "(scored with missing item features, as the service does)"
        )


@dataclass(frozen=True)
class ModelRows:
    data: RankingDataset  # columns: the model's request_feature_names, in order
    items: ItemJoin | None


def load_model_rows(
    artifact: Artifact, path: Path, items: Path | None = None, items_id_column: str | None = None
) -> ModelRows:
    """Read `path` for `artifact`; `items`: an item table (Parquet) instead of the snapshot,
    keyed by `items_id_column` (default: the data's document id column, as in training)."""
    manifest = artifact.manifest
    item_set = manifest.item_features
    if item_set is None:
        if items is not None:
            raise DataFormatError(
                f"--items {items}: model {manifest.name} {manifest.version} reads no item features"
            )
        skip = _skipped_id_column(path, manifest.request_feature_names)
        data = load_dataset(path, feature_names=manifest.request_feature_names, id_column=skip)
        check_query_columns(data, manifest.names_from("query"))
        return ModelRows(data, None)
    _check_id_column(path, item_set.id_column, manifest.names_from("item"))
    data = load_dataset(path, id_column=item_set.id_column)
    item_names = manifest.names_from("item")
    joined, join = join_items(artifact, data, item_names, items, items_id_column)
    check_query_columns(joined, manifest.names_from("query"))
    return ModelRows(align_features(joined, manifest.request_feature_names), join)


def join_items(
    artifact: Artifact,
    data: RankingDataset,
    names: list[str],
    items: Path | None = None,
    items_id_column: str | None = None,
) -> tuple[RankingDataset, ItemJoin]:
    """`data` (with doc_ids) with the item features `names` appended, looked up by id."""
    item_set = artifact.manifest.item_features
    assert item_set is not None and data.doc_ids is not None
    clash = sorted(set(data.names()) & set(names))
    if clash:
        raise DataFormatError(
            f"{data.source}: columns {clash[:5]} are item features of the model, joined by "
            f"{item_set.id_column!r}; a feature comes from one source (drop them from the data)"
        )
    snapshot, source = _item_source(artifact, items, items_id_column)
    absent = [n for n in names if n not in snapshot.names]
    if absent:
        raise DataFormatError(
            f"{source}: no item feature columns {', '.join(absent[:5])} (the model reads "
            f"{', '.join(names)})"
        )
    columns = np.asarray([snapshot.names.index(n) for n in names], dtype=np.int64)
    values, found = snapshot.lookup(data.doc_ids.tolist(), columns)
    return data.with_columns(values, names), ItemJoin(source, item_set.id_column, found)


def _item_source(
    artifact: Artifact, items: Path | None, items_id_column: str | None = None
) -> tuple[ItemSnapshot, str]:
    item_set = artifact.manifest.item_features
    assert item_set is not None
    if items is not None:
        try:
            table = read_item_table(items, items_id_column or item_set.id_column)
        except DataFormatError as exc:
            schema = _schema(items)  # the error path only: is the table keyed by another column?
            keyed_apart = schema is not None and item_set.id_column not in schema.names
            if items_id_column is None and keyed_apart:
                raise DataFormatError(f"{exc}; give --items-id-column NAME") from None
            raise
        return as_snapshot(table), str(items)
    if items_id_column is not None:
        raise DataFormatError("--items-id-column names a column of --items FILE: give both")
    label = f"{item_set.set}@{item_set.version}"
    if not item_set.has_snapshot:
        raise DataFormatError(
            f"{artifact.path}: the version carries no snapshot of its item set {label} "
            "(it is served from Redis): pass --items FILE, the item table to join"
        )
    return ItemSnapshot.load(artifact.path, item_set), f"{artifact.path} (item set {label})"


def _check_id_column(path: Path, id_column: str, item_names: list[str]) -> None:
    """The data must be Parquet with string or integer document ids, as requests send them
    (a float id 17.0 would be cast to the item "17", a request's to "17.0")."""
    needs = f"the model reads item features ({', '.join(item_names)}) by document id"
    if Path(path).suffix.lower() not in PARQUET_SUFFIXES:
        raise DataFormatError(f"{path}: {needs}: give Parquet data with a {id_column!r} column")
    schema = _schema(path)
    if schema is None:
        return  # load_dataset reports the missing or unreadable file
    if id_column not in schema.names:
        raise DataFormatError(f"{path}: no document id column {id_column!r}; {needs}")
    import pyarrow as pa

    kind = schema.field(id_column).type
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    if not (
        pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_integer(kind)
    ):
        raise DataFormatError(
            f"{path}: column {id_column!r}: has type {kind}, expected document ids as strings "
            "or integers"
        )


def _skipped_id_column(path: Path, features: list[str]) -> str | None:
    schema = _schema(path) if Path(path).suffix.lower() in PARQUET_SUFFIXES else None
    if schema is None or DEFAULT_ID_COLUMN in features:
        return None
    return DEFAULT_ID_COLUMN if DEFAULT_ID_COLUMN in schema.names else None


def _schema(path: Path) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_schema(path)
    except (pa.ArrowException, OSError):
        return None


def model_columns(artifact: Artifact, data: RankingDataset) -> RankingDataset:
    """Named `data` lined up with the model's columns by name (unnamed LETOR data is positional
    and kept as is); item features the data lacks are joined from the version's snapshot when
    the data has document ids."""
    if data.feature_names is None:
        return data
    manifest = artifact.manifest
    item_set = manifest.item_features
    lacking = [n for n in manifest.names_from("item") if n not in data.feature_names]
    if lacking and data.doc_ids is not None and item_set is not None and item_set.has_snapshot:
        data, _ = join_items(artifact, data, lacking)
    return align_features(data, manifest.request_feature_names)
