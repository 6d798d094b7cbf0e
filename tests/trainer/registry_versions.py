"""Named model versions in a runs directory, for publish / rollback / prune tests."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from app.artifacts.manifest import Manifest, MissingValueRule
from app.artifacts.store import write_version_dir
from app.artifacts.tree_dump import TreeEnsemble
from tests.support import stump


def run_version(
    runs: Path, version: str, features: tuple[str, ...] = ("a", "b"), leaf: float = 1.0
) -> Path:
    """`ltr train --out runs/<version>`: a lambdamart version of model `m`."""
    manifest = Manifest(
        name="m",
        version=version,
        kind="lambdamart",
        created_at=dt.datetime.now(dt.UTC),
        feature_names=list(features),
        missing_value=MissingValueRule(handled_by="tree_default_direction"),
    )
    model = TreeEnsemble(len(features), [stump(leaf)]).to_json_bytes()
    return write_version_dir(runs / version, manifest, {"model.json": model})
