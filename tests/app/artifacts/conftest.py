from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from app.artifacts.manifest import Manifest, MissingValueRule, new_version_id
from app.artifacts.tree_dump import Tree, TreeEnsemble


def stump(feature: int, threshold: float, low: float, high: float) -> Tree:
    return Tree(
        split_feature=np.array([feature], dtype=np.int32),
        threshold=np.array([threshold]),
        left=np.array([~0], dtype=np.int32),
        right=np.array([~1], dtype=np.int32),
        default_left=np.array([True]),
        leaf_value=np.array([low, high]),
    )


@pytest.fixture
def ensemble() -> TreeEnsemble:
    deep = Tree(  # root on f1, left child on f0
        split_feature=np.array([1, 0], dtype=np.int32),
        threshold=np.array([0.5, 0.25]),
        left=np.array([1, ~0], dtype=np.int32),
        right=np.array([~2, ~1], dtype=np.int32),
        default_left=np.array([False, True]),
        leaf_value=np.array([-1.0, 0.5, 2.0]),
    )
    return TreeEnsemble(num_features=2, trees=[stump(0, 0.5, 0.0, 1.0), deep], base_score=0.25)


@pytest.fixture
def manifest() -> Manifest:
    return Manifest(
        name="demo",
        version=new_version_id(),
        kind="lambdamart",
        created_at=dt.datetime.now(dt.UTC),
        feature_names=["bm25", "ctr"],
        missing_value=MissingValueRule(handled_by="tree_default_direction"),
    )
