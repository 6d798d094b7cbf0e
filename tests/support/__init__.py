"""Test helpers: small random tree ensembles published into a registry directory."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np

from app.artifacts.manifest import Manifest, MissingValueRule, new_version_id
from app.artifacts.store import Artifact, set_current, write_version
from app.artifacts.tree_dump import Tree, TreeEnsemble
from app.scoring.reference import predict


def random_tree(rng: np.random.Generator, num_features: int, depth: int) -> Tree:
    """A full binary tree of `depth` levels of splits; nodes in breadth-first order."""
    n_internal = 2**depth - 1
    children = np.arange(1, 2 * n_internal + 1).reshape(n_internal, 2)
    # A child index past the internal nodes is a leaf: encode as ~leaf_index.
    encoded = np.where(children < n_internal, children, ~(children - n_internal))
    return Tree(
        split_feature=rng.integers(0, num_features, n_internal).astype(np.int32),
        threshold=np.round(rng.normal(0.0, 1.0, n_internal), 3).astype(np.float64),
        left=encoded[:, 0].astype(np.int32),
        right=encoded[:, 1].astype(np.int32),
        default_left=rng.random(n_internal) < 0.5,
        leaf_value=rng.normal(0.0, 1.0, n_internal + 1),
    )


def random_ensemble(
    num_features: int, num_trees: int = 8, depth: int = 3, seed: int = 0
) -> TreeEnsemble:
    rng = np.random.default_rng(seed)
    trees = [random_tree(rng, num_features, depth) for _ in range(num_trees)]
    return TreeEnsemble(num_features, trees, base_score=0.5)


def stump(leaf: float = 1.0, feature: int = 0, threshold: float = 0.5) -> Tree:
    """One split: `feature` <= `threshold` (or missing) scores 0, above it `leaf`."""
    return Tree(
        split_feature=np.array([feature], np.int32),
        threshold=np.array([threshold]),
        left=np.array([~0], np.int32),
        right=np.array([~1], np.int32),
        default_left=np.array([True]),
        leaf_value=np.array([0.0, leaf]),
    )


def with_covers(ensemble: TreeEnsemble, seed: int = 3) -> TreeEnsemble:
    """`ensemble` with random training counts at its leaves (what TreeSHAP needs)."""
    rng = np.random.default_rng(seed)
    trees = [t.with_leaf_covers(rng.integers(1, 50, t.num_leaves)) for t in ensemble.trees]
    return TreeEnsemble(ensemble.num_features, trees, ensemble.base_score)


def feature_names(num_features: int) -> list[str]:
    return [f"f{i}" for i in range(num_features)]


def publish(
    registry: Path,
    ensemble: TreeEnsemble,
    name: str = "m",
    version: str | None = None,
    current: bool = True,
    names: list[str] | None = None,
) -> str:
    """Write a lambdamart version of `ensemble` (and point CURRENT at it); its version id."""
    version = version or new_version_id()
    manifest = Manifest(
        name=name,
        version=version,
        kind="lambdamart",
        created_at=dt.datetime.now(dt.UTC),
        feature_names=names or feature_names(ensemble.num_features),
        missing_value=MissingValueRule(handled_by="tree_default_direction"),
    )
    write_version(registry, manifest, {"model.json": ensemble.to_json_bytes()})
    if current:
        set_current(registry, name, version)
    return version


class ReferenceScorer:
    """The reference scorer behind the Scorer protocol (for tests that exercise the registry
    on its own, apart from whichever compiled scorer the service loads)."""

    def __init__(self, ensemble: TreeEnsemble) -> None:
        self.ensemble = ensemble
        self.num_features = ensemble.num_features

    def score(self, features: np.ndarray, user: np.ndarray | None = None) -> np.ndarray:
        return predict(self.ensemble, features)


def reference_loader(artifact: Artifact) -> ReferenceScorer:
    return ReferenceScorer(TreeEnsemble.from_json_bytes(artifact.files["model.json"]))
