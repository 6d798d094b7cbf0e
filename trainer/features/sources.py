"""Training with feature sources: query-level columns and an item table joined by document id,
recorded in the model version so the service assembles the same rows. What sources to join
comes from `trainer.features.spec` (a `--features-spec` file and the flags).

The model's columns are the training data's own (candidate and query features, file order)
followed by the item table's features. Documents whose id the table lacks get NaN, exactly what
the service gives an item its store does not know.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.artifacts.manifest import FeatureSource, ItemFeatureSet, Manifest
from app.artifacts.store import load_version, write_version_dir
from app.features.item_snapshot import write_snapshot
from trainer.data.dataset import RankingDataset
from trainer.data.errors import DataFormatError
from trainer.data.loader import align_features, load_dataset, present_id_column
from trainer.features.item_table import ItemTable, as_snapshot, read_item_table
from trainer.features.source_checks import ItemCoverage, check_query_names

# Re-exported: nightly, the demo and older callers import them from here.
from trainer.features.spec import FeatureSpec as FeatureSpec
from trainer.features.spec import SpecError as SpecError
from trainer.features.spec import build_spec as build_spec


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
    table = read_item_table(spec.items, spec.table_id_column) if spec.items is not None else None
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
    if spec.items is not None or present_id_column(data_file, spec.id_column) is not None:
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
            f"{str(table.ids[0]) if table.ids.size else ''!r}): check --id-column (the "
            "data's) and --items-id-column (the table's)"
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
