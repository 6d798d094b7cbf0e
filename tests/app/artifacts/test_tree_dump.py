from __future__ import annotations

import numpy as np
import orjson
import pytest

from app.artifacts.tree_dump import TreeDumpError, TreeEnsemble
from app.scoring.reference import predict


def test_round_trip_keeps_scores(ensemble: TreeEnsemble) -> None:
    back = TreeEnsemble.from_json_bytes(ensemble.to_json_bytes())
    x = np.array([[0.1, 0.1], [0.9, 0.9], [np.nan, np.nan], [0.5, 0.5]], dtype=np.float32)
    np.testing.assert_array_equal(predict(back, x), predict(ensemble, x))


def test_scores_follow_the_contract(ensemble: TreeEnsemble) -> None:
    x = np.array([[0.1, 0.1], [0.3, 0.1], [0.9, 0.9], [np.nan, np.nan], [0.5, 0.5]], np.float32)
    # stump: f0 <= 0.5 → 0 else 1 (NaN left); deep: f1 <= 0.5 → (f0 <= 0.25 → -1 else 0.5) else 2,
    # NaN on f1 goes right, NaN on f0 goes left.
    expected = 0.25 + np.array([0 - 1.0, 0 + 0.5, 1 + 2.0, 0 + 2.0, 0 + 0.5])
    np.testing.assert_allclose(predict(ensemble, x), expected)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda t: t.update(left=[5]), "child node index out of range"),
        (lambda t: t.update(leaf_value=[1.0]), "1 leaves for 1 splits"),
        (lambda t: t.update(split_feature=[7]), "split feature out of range"),
        (lambda t: t.pop("threshold"), "missing field 'threshold'"),
        (lambda t: t.update(right=[~0]), "leaves are not referenced exactly once"),
        (lambda t: t.update(leaf_value=[1.0, float("inf")]), "leaf values must be finite"),
    ],
)
def test_malformed_trees_are_refused(ensemble: TreeEnsemble, mutate, message: str) -> None:
    doc = orjson.loads(ensemble.to_json_bytes())
    mutate(doc["trees"][0])
    with pytest.raises(TreeDumpError, match=message):
        TreeEnsemble.from_json_bytes(orjson.dumps(doc))


def test_not_json_is_refused() -> None:
    with pytest.raises(TreeDumpError, match="not valid JSON"):
        TreeEnsemble.from_json_bytes(b"{nope")
    with pytest.raises(TreeDumpError, match="not an ltr-tree-dump"):
        TreeEnsemble.from_json_bytes(b"{}")


def test_wrong_feature_count_is_refused(ensemble: TreeEnsemble) -> None:
    with pytest.raises(ValueError, match=r"shape \[n, 2\]"):
        predict(ensemble, np.zeros((3, 5), dtype=np.float32))


def test_a_cycle_unreachable_from_the_root_is_refused() -> None:
    # Reference counts are right (nodes 1 and 2 once each, leaves 0..3 once each), but 1 and 2
    # point at each other and the root points at leaves only.
    tree = {
        "split_feature": [0, 0, 0],
        "threshold": [0.5, 0.5, 0.5],
        "left": [~0, 2, 1],
        "right": [~1, ~2, ~3],
        "default_left": [True, True, True],
        "leaf_value": [0.0, 1.0, 2.0, 3.0],
    }
    doc = {"format": "ltr-tree-dump", "format_version": 1, "num_features": 1, "trees": [tree]}
    with pytest.raises(TreeDumpError, match="unreachable from the root"):
        TreeEnsemble.from_json_bytes(orjson.dumps(doc))


def _two_level_tree(thresholds: list[object]) -> dict[str, object]:
    return {
        "split_feature": [0, 1],
        "threshold": thresholds,
        "left": [1, ~0],
        "right": [~2, ~1],
        "default_left": [False, False],
        "leaf_value": [1.0, 2.0, 4.0],
    }


def test_infinite_thresholds_survive_the_file() -> None:
    # LightGBM writes `inf` for a split that sends every number left and only NaN right.
    doc = {
        "format": "ltr-tree-dump",
        "format_version": 1,
        "num_features": 2,
        "trees": [_two_level_tree(["Infinity", "-Infinity"])],
    }
    ensemble = TreeEnsemble.from_json_bytes(orjson.dumps(doc))
    np.testing.assert_array_equal(ensemble.trees[0].threshold, [np.inf, -np.inf])
    back = TreeEnsemble.from_json_bytes(ensemble.to_json_bytes())
    np.testing.assert_array_equal(back.trees[0].threshold, [np.inf, -np.inf])
    inf = np.inf
    x = np.array([[inf, -inf], [np.nan, 0.0], [-inf, np.nan], [3.0, -inf]], dtype=np.float32)
    # f0 <= inf for every number (NaN right: 4); then f1 <= -inf only for -inf (NaN right: 2).
    np.testing.assert_array_equal(predict(back, x), [1.0, 4.0, 2.0, 1.0])


@pytest.mark.parametrize("bad", ["inf", "Infinityy", "NaN", "1.5"])
def test_a_threshold_string_other_than_the_infinities_is_refused(bad: str) -> None:
    doc = {
        "format": "ltr-tree-dump",
        "format_version": 1,
        "num_features": 2,
        "trees": [_two_level_tree([0.5, bad])],
    }
    with pytest.raises(TreeDumpError, match="not a number"):
        TreeEnsemble.from_json_bytes(orjson.dumps(doc))


def _chain(splits: int) -> bytes:
    """One tree whose every split sends one side to a leaf: `splits` deep."""
    tree = {
        "split_feature": [0] * splits,
        "threshold": [float(i) for i in range(splits)],
        "left": [i + 1 for i in range(splits - 1)] + [~splits],
        "right": [~i for i in range(splits)],
        "default_left": [True] * splits,
        "leaf_value": [0.0] * (splits + 1),
    }
    doc = {"format": "ltr-tree-dump", "format_version": 1, "num_features": 1, "trees": [tree]}
    return orjson.dumps(doc)


def test_a_tree_too_deep_to_serve_is_refused() -> None:
    """A crafted chain of 200,000 splits passed: its compile grew past 2 GB and its TreeSHAP
    tables took minutes (a held-out security review)."""
    from app.artifacts.tree_dump import MAX_DEPTH

    assert TreeEnsemble.from_json_bytes(_chain(MAX_DEPTH)).trees[0].num_nodes == MAX_DEPTH
    with pytest.raises(TreeDumpError, match=f"{MAX_DEPTH + 1:,} splits deep; at most"):
        TreeEnsemble.from_json_bytes(_chain(MAX_DEPTH + 1))


def test_a_tree_of_more_splits_than_lightgbm_writes_is_refused() -> None:
    from app.artifacts.tree_dump import MAX_SPLITS

    n = MAX_SPLITS + 1  # a balanced tree: node i's children are 2i+1 and 2i+2
    left = [2 * i + 1 if 2 * i + 1 < n else ~(2 * i + 1 - n) for i in range(n)]
    right = [2 * i + 2 if 2 * i + 2 < n else ~(2 * i + 2 - n) for i in range(n)]
    tree = {
        "split_feature": [0] * n,
        "threshold": [0.5] * n,
        "left": left,
        "right": right,
        "default_left": [True] * n,
        "leaf_value": [0.0] * (n + 1),
    }
    doc = {"format": "ltr-tree-dump", "format_version": 1, "num_features": 1, "trees": [tree]}
    with pytest.raises(TreeDumpError, match=f"{n:,} splits; at most {MAX_SPLITS:,}"):
        TreeEnsemble.from_json_bytes(orjson.dumps(doc))
