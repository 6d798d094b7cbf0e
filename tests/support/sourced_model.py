"""A tree model whose features come from candidates, the query and an item store, published
with its in-process item snapshot (for service tests and benchmarks)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np

from app.artifacts.manifest import FeatureSource, ItemFeatureSet, Manifest, MissingValueRule
from app.artifacts.store import set_current
from app.artifacts.tree_dump import TreeEnsemble
from trainer.features.item_table import ItemTable
from trainer.features.sources import write_sourced_version


def item_table(n_items: int, names: list[str], seed: int = 0, prefix: str = "d") -> ItemTable:
    """Items `{prefix}0..` with rounded normal values and some NaN."""
    rng = np.random.default_rng(seed)
    matrix = rng.normal(0, 1, (n_items, len(names))).round(3).astype(np.float32)
    matrix[rng.random(matrix.shape) < 0.05] = np.nan
    ids = np.asarray([f"{prefix}{i}" for i in range(n_items)], dtype=np.str_)
    return ItemTable(ids, matrix, names, "synthetic")


def publish_sourced(
    registry: Path,
    ensemble: TreeEnsemble,
    sources: dict[str, FeatureSource],
    table: ItemTable | None,
    *,
    name: str = "m",
    version: str = "v1",
    set_name: str = "catalog",
    feature_names: list[str] | None = None,
    snapshot: bool = True,
) -> Path:
    """Write `<registry>/<name>/<version>` (CURRENT → it): features `feature_names` (default
    f0..), `sources` for the non-candidate ones, `table` as the item set (and snapshot)."""
    names = feature_names or [f"f{i}" for i in range(ensemble.num_features)]
    item_set = None
    if table is not None:
        item_set = ItemFeatureSet(set=set_name, version=table.version(), names=table.names)
    manifest = Manifest(
        name=name,
        version=version,
        kind="lambdamart",
        created_at=dt.datetime.now(dt.UTC),
        feature_names=names,
        missing_value=MissingValueRule(handled_by="tree_default_direction"),
        feature_sources=sources,
        item_features=item_set,
    )
    files: dict[str, bytes | Path] = {"model.json": ensemble.to_json_bytes()}
    path = write_sourced_version(
        Path(registry) / name / version, manifest, files, table if snapshot else None
    )
    set_current(registry, name, version)
    return path
