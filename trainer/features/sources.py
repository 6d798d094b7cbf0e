"""Training with feature sources: query-level columns and an item table joined by document id,
recorded in the model version so the service assembles the same rows.

A features spec (TOML or JSON; flags override it):

    query = ["query_length", "hour"]     # columns of the training data, constant per query
    [item]
    table = "items.parquet"               # relative to the spec file
    set = "catalog"                       # the item feature set's name (Redis, manifests)
    id_column = "doc_id"                  # in the training data and in the item table

The model's columns are the training data's own (candidate and query features, file order)
followed by the item table's features. Documents whose id the table lacks get NaN, exactly what
the service gives an item its store does not know.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from app.artifacts.manifest import NAME_PATTERN, FeatureSource, ItemFeatureSet, Manifest
from app.artifacts.store import load_version, write_version_dir
from app.errors import LtrError
from app.features.item_snapshot import write_snapshot
from trainer.data.dataset import RankingDataset
from trainer.data.errors import DataFormatError
from trainer.data.loader import align_features, load_dataset
from trainer.features.item_table import ItemTable, as_snapshot, read_item_table
from trainer.features.source_checks import ItemCoverage, check_query_names


class SpecError(LtrError, ValueError):
    """A features spec or flag combination that cannot be used (names the file or flag)."""


@dataclass(frozen=True)
class FeatureSpec:
    query: list[str]
    items: Path | None
    item_set: str
    id_column: str


def build_spec(
    spec_file: Path | None,
    query_features: str | None,
    items: Path | None,
    item_set: str | None,
    id_column: str | None,
) -> FeatureSpec | None:
    """The spec from the file and the flags; None when neither names any source."""
    doc = _read_spec(spec_file) if spec_file is not None else {}
    item_doc = doc.get("item", {})
    if not isinstance(item_doc, dict):
        raise SpecError(f"{spec_file}: [item] must be a table")
    query = doc.get("query", [])
    if query_features is not None:
        query = [q.strip() for q in query_features.split(",") if q.strip()]
    if not isinstance(query, list) or not all(isinstance(q, str) for q in query):
        raise SpecError(f"{spec_file}: query must be a list of column names")
    table = items
    if table is None and item_doc.get("table"):
        table = Path(spec_file or ".").parent / str(item_doc["table"])
    set_name = item_set or str(item_doc.get("set", "items"))
    if not re.fullmatch(NAME_PATTERN, set_name):
        raise SpecError(f"item set name {set_name!r} must match {NAME_PATTERN}")
    column = id_column or str(item_doc.get("id_column", "doc_id"))
    if not query and table is None:
        if spec_file is not None:
            raise SpecError(f"{spec_file}: names no query columns and no item table")
        return None
    return FeatureSpec(list(query), table, set_name, column)


def _read_spec(path: Path) -> dict[str, Any]:
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise SpecError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        doc = (
            json.loads(raw)
            if Path(path).suffix == ".json"
            else tomllib.loads(raw.decode("utf-8-sig"))
        )
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise SpecError(f"{path}: not a valid features spec ({exc})") from None
    if not isinstance(doc, dict):
        raise SpecError(f"{path}: expected a table of `query` and `[item]`")
    unknown = sorted(set(doc) - {"query", "item"})
    if unknown:
        raise SpecError(f"{path}: unknown key(s) {unknown} (expected query, item)")
    return doc


@dataclass(frozen=True)
class SourcePlan:
    """What a trained model's manifest must record: each non-candidate feature's source, the
    item table (becomes the snapshot) and the item set it is published as."""

    sources: dict[str, FeatureSource]
    items: ItemTable | None
    item_set: ItemFeatureSet | None


@dataclass(frozen=True)
class SourcedData:
    train: RankingDataset
    valid: RankingDataset | None
    plan: SourcePlan
    coverage: list[ItemCoverage]  # per data file (train, valid) when an item table is joined


def load_sourced(spec: FeatureSpec, train_file: Path, valid_file: Path | None) -> SourcedData:
    """Training (and validation) data with the item table joined and the sources checked."""
    table = read_item_table(spec.items, spec.id_column) if spec.items is not None else None
    id_column = data_id_column(spec, train_file)
    train, coverage = _sourced(load_dataset(train_file, id_column=id_column), spec, table)
    valid = None
    if valid_file is not None:
        valid, valid_coverage = _sourced(load_dataset(valid_file, id_column=id_column), spec, table)
        valid = align_features(valid, train.names())
        coverage += valid_coverage
    return SourcedData(train, valid, source_plan(spec, table), coverage)


def data_id_column(spec: FeatureSpec, data_file: Path) -> str | None:
    """The id column to read from a data file: needed to join items, skipped as a feature."""
    if spec.items is not None or _has_column(data_file, spec.id_column):
        return spec.id_column
    return None


def apply_sources(
    data: RankingDataset, spec: FeatureSpec, table: ItemTable | None
) -> RankingDataset:
    """`data` with the item table joined on its document ids and its query columns checked."""
    return _sourced(data, spec, table)[0]


def _sourced(
    data: RankingDataset, spec: FeatureSpec, table: ItemTable | None
) -> tuple[RankingDataset, list[ItemCoverage]]:
    check_query_names(data, spec, table)
    joined, coverage = _joined(data, table)
    check_query_columns(joined, spec.query)
    return joined, coverage


def source_plan(spec: FeatureSpec, table: ItemTable | None) -> SourcePlan:
    sources: dict[str, FeatureSource] = dict.fromkeys(spec.query, "query")
    item_set = None
    if table is not None:
        sources.update(dict.fromkeys(table.names, "item"))
        item_set = ItemFeatureSet(
            set=spec.item_set, version=table.version(), names=table.names, id_column=spec.id_column
        )
    return SourcePlan(sources, table, item_set)


def _has_column(path: Path, column: str) -> bool:
    """Whether Parquet data has `column` (a document id column is not a feature even when no
    item table is joined)."""
    if Path(path).suffix.lower() not in (".parquet", ".pq"):
        return False
    import pyarrow.parquet as pq

    try:
        return column in pq.read_schema(path).names
    except (OSError, ValueError):
        return False  # the loader reports the unreadable file


def _joined(
    data: RankingDataset, table: ItemTable | None
) -> tuple[RankingDataset, list[ItemCoverage]]:
    if table is None:
        return data, []
    assert data.doc_ids is not None
    clash = sorted(set(data.names()) & set(table.names))
    if clash:
        raise DataFormatError(
            f"{data.source}: columns {clash[:5]} are also in the item table {table.source}; "
            "a feature comes from one source"
        )
    ids = list(data.doc_ids)
    rows, found = as_snapshot(table).lookup(ids, np.arange(len(table.names)))
    if ids and not found.any():
        # Trained on, every item feature would be missing: surely the wrong id column, or
        # ids written another way (an integer id 17 is the item "17").
        raise DataFormatError(
            f"{data.source}: none of its {len(ids):,} document ids is in the item table "
            f"{table.source} (its ids look like {str(ids[0])!r}, the table's like "
            f"{str(table.ids[0]) if table.ids.size else ''!r}): check --id-column"
        )
    coverage = ItemCoverage(data.source, table.source, len(ids), int(len(ids) - found.sum()))
    return data.with_columns(rows, table.names), [coverage]


def check_query_columns(data: RankingDataset, names: list[str]) -> None:
    """Each query column exists and holds one value per query (NaN counts as a value)."""
    index = {name: j for j, name in enumerate(data.names())}
    for name in names:
        if name not in index:
            raise DataFormatError(f"{data.source}: no query feature column {name!r}")
        column = data.features[:, index[name]]
        first = np.repeat(column[data.group_offsets[:-1]], data.group_sizes)
        differs = ~((column == first) | (np.isnan(column) & np.isnan(first)))
        if differs.any():
            row = int(np.flatnonzero(differs)[0]) + 1
            raise DataFormatError(
                f"{data.source}: row {row}, column {name!r}: a query feature must be the same "
                "for every document of a query"
            )


def staging_dir(out: Path) -> Path:
    """Where training writes before `attach_sources` makes the final version `out`."""
    return Path(out).parent / f".{Path(out).name}.staging" / Path(out).name


def attach_sources(trained: Path, out: Path, plan: SourcePlan) -> Path:
    """Rewrite the version `trained` as `out` with the feature sources in its manifest and the
    item snapshot among its files (verified like every other file); `trained` is removed."""
    artifact = load_version(trained)
    manifest = artifact.manifest.model_copy(
        update={"feature_sources": plan.sources, "item_features": plan.item_set}
    )
    path = write_sourced_version(out, manifest, artifact.all_files(), plan.items)
    shutil.rmtree(trained.parent if trained.parent.name.startswith(".") else trained)
    return path


def write_sourced_version(
    out: Path, manifest: Manifest, files: Mapping[str, bytes | Path], items: ItemTable | None
) -> Path:
    """Write the version directory `out`, with `items` as its in-process item snapshot
    (`items.npy`, `item_ids.npy`, named in `manifest.item_features`)."""
    all_files: dict[str, bytes | Path] = dict(files)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".items.", dir=Path(out).parent) as tmp:
        item_set = manifest.item_features
        if items is not None and item_set is not None:
            snapshot, _ = write_snapshot(Path(tmp), items.ids.tolist(), items.matrix)
            all_files.update(snapshot)
            item_set = item_set.model_copy(
                update={"matrix_file": "items.npy", "ids_file": "item_ids.npy"}
            )
        return write_version_dir(
            out, manifest.model_copy(update={"item_features": item_set}), all_files
        )
