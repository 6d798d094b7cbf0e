"""The feature sources of a model retrained on its own click logs.

The service logs the assembled row it scored (candidate, query and item-store columns in model
column order), so the logs train a model over the deployed model's columns. Published as plain
candidate features, that model would ask clients for every item feature again; so the new
version keeps the deployed version's sources and carries an item snapshot: the item table the
nightly config names (today's catalogue, which is what will serve), else the deployed
version's own snapshot. A Redis-only item set (no snapshot) stays the set version already live.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from app.artifacts.manifest import FeatureSource, ItemFeatureSet, Manifest
from app.artifacts.store import load_version, read_current
from trainer.data.errors import DataFormatError
from trainer.features.item_table import ItemTable, read_item_table
from trainer.features.sources import SourcePlan
from trainer.nightly.config import NightlyConfig

_SOURCED: tuple[FeatureSource, ...] = ("query", "item")


def deployed_manifest(config: NightlyConfig) -> Manifest | None:
    """The manifest of `model.name`'s CURRENT version in the publish registry, if any."""
    registry, name = Path(config.publish.registry), config.model.name
    version = read_current(registry, name)
    if version is None:
        return None
    return load_version(registry / name / version).manifest


def served_plan(config: NightlyConfig, manifest: Manifest) -> SourcePlan | None:
    """What the retrained version's manifest must record; None when every feature is sent per
    candidate (nothing to carry over)."""
    if not manifest.has_sources:
        return None
    sources = {n: s for n, s in manifest.feature_sources.items() if s in _SOURCED}
    served_set = manifest.item_features
    if served_set is None:
        return SourcePlan(sources, None, None)
    table = _item_table(config, manifest, served_set)
    if table is None:
        return SourcePlan(sources, None, served_set.model_copy(update=_NO_SNAPSHOT))
    item_set = ItemFeatureSet(
        set=served_set.set,
        version=table.version(),
        names=table.names,
        id_column=served_set.id_column,
    )
    return SourcePlan(sources, table, item_set)


_NO_SNAPSHOT = {"matrix_file": None, "ids_file": None}


def _item_table(
    config: NightlyConfig, manifest: Manifest, served_set: ItemFeatureSet
) -> ItemTable | None:
    wanted = manifest.names_from("item")
    where = f"{manifest.name}/{manifest.version}"
    features = config.features
    if features.items is not None:
        table = read_item_table(features.items, features.items_id_column or features.id_column)
        missing = [n for n in wanted if n not in table.names]
        if missing:
            raise DataFormatError(
                f"{config.features.items}: no columns {missing[:5]}, item features the "
                f"deployed model {where} reads (and its logs hold)"
            )
        return table
    if served_set.matrix_file is None or served_set.ids_file is None:
        return None
    directory = Path(config.publish.registry) / manifest.name / manifest.version
    ids = np.load(directory / served_set.ids_file, allow_pickle=False)
    matrix = np.load(directory / served_set.matrix_file, allow_pickle=False)
    return ItemTable(ids, matrix, list(served_set.names), f"{directory} (item snapshot)")
