"""TreeSHAP against the definition (Shapley values by enumeration) and against the scores."""

from __future__ import annotations

import itertools
import math

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.artifacts.tree_dump import ZERO_THRESHOLD, Tree, TreeEnsemble
from app.explain.tree_tables import ExplainUnavailable
from app.explain.treeshap import TreeShapExplainer
from app.scoring import reference
from tests.app.scoring.ensembles import ensemble_and_rows


@st.composite
def covered(draw: st.DrawFn) -> tuple[TreeEnsemble, np.ndarray]:
    """An ensemble whose leaves carry random positive covers (nodes: the sums), and rows."""
    ensemble, rows = draw(ensemble_and_rows(max_rows=8))
    cover = st.floats(0.5, 1000, allow_nan=False)
    trees = [
        t.with_leaf_covers(np.array(draw(st.lists(cover, min_size=n, max_size=n))))
        for t in ensemble.trees
        for n in [t.num_leaves]
    ]
    return TreeEnsemble(ensemble.num_features, trees, ensemble.base_score), rows


def _goes_left(tree: Tree, node: int, value: float) -> bool:
    missing = math.isnan(value) or (
        tree.missing_zero is not None
        and bool(tree.missing_zero[node])
        and abs(value) <= ZERO_THRESHOLD
    )
    return bool(tree.default_left[node]) if missing else value <= tree.threshold[node]


def _conditional(tree: Tree, x: np.ndarray, known: set[int], node: int = 0) -> float:
    """E[tree(x) | x_known] with unknown features integrated out by cover (Lundberg Alg. 1)."""
    if tree.num_nodes == 0:
        return float(tree.leaf_value[0])
    if node < 0:
        return float(tree.leaf_value[~node])
    left, right = int(tree.left[node]), int(tree.right[node])
    feature = int(tree.split_feature[node])
    if feature in known:
        return _conditional(tree, x, known, left if _goes_left(tree, node, x[feature]) else right)
    assert tree.cover is not None and tree.leaf_cover is not None

    def cover(c: int) -> float:
        return float(tree.cover[c] if c >= 0 else tree.leaf_cover[~c])  # type: ignore[index]

    return (
        cover(left) * _conditional(tree, x, known, left)
        + cover(right) * _conditional(tree, x, known, right)
    ) / cover(node)


def _shapley(ensemble: TreeEnsemble, x: np.ndarray) -> np.ndarray:
    """Shapley values by enumerating every coalition: exponential, obviously the definition."""
    m = ensemble.num_features

    def value(known: set[int]) -> float:
        return ensemble.base_score + sum(_conditional(t, x, known) for t in ensemble.trees)

    phi = np.zeros(m + 1)
    phi[m] = value(set())
    for i in range(m):
        others = [j for j in range(m) if j != i]
        for size in range(m):
            weight = math.factorial(size) * math.factorial(m - size - 1) / math.factorial(m)
            for subset in itertools.combinations(others, size):
                known = set(subset)
                phi[i] += weight * (value(known | {i}) - value(known))
    return phi


@settings(max_examples=80, deadline=None)
@given(covered())
def test_contributions_are_the_shapley_values(case: tuple[TreeEnsemble, np.ndarray]) -> None:
    ensemble, rows = case
    got = TreeShapExplainer(ensemble).contributions(rows)
    expected = np.array([_shapley(ensemble, row.astype(np.float64)) for row in rows])
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-9 * scale)


@settings(max_examples=80, deadline=None)
@given(covered())
def test_contributions_sum_to_the_score(case: tuple[TreeEnsemble, np.ndarray]) -> None:
    ensemble, rows = case
    got = TreeShapExplainer(ensemble).contributions(rows)
    scores = reference.predict(ensemble, rows)
    scale = max(1.0, float(np.abs(got).max()))
    np.testing.assert_allclose(got.sum(axis=1), scores, rtol=0, atol=1e-9 * scale)


@pytest.mark.parametrize("zero_leaf", [0, 1, 2])
def test_a_leaf_no_training_row_reached_keeps_the_values_exact(
    ensemble: TreeEnsemble, zero_leaf: int
) -> None:
    """Cover 0 on an edge (Z = 0: the factors vanish or become t) is still the definition,
    with the feature split on twice along a path (f1 at the root and below it)."""
    deep = ensemble.trees[1]
    twice = Tree(
        split_feature=np.array([1, 0, 1], dtype=np.int32),
        threshold=np.array([0.5, 0.25, 0.1]),
        left=np.array([1, 2, ~0], dtype=np.int32),
        right=np.array([~3, ~2, ~1], dtype=np.int32),
        default_left=np.array([False, True, True]),
        leaf_value=np.array([-1.0, 0.5, 2.0, 0.75]),
    )
    covers = np.array([3.0, 5.0, 2.0, 7.0])
    covers[zero_leaf] = 0.0
    trees = [twice.with_leaf_covers(covers), deep.with_leaf_covers(np.array([4.0, 1.0, 6.0]))]
    model = TreeEnsemble(2, trees, ensemble.base_score)
    rows = np.array([[0.1, 0.05], [0.3, 0.2], [np.nan, 0.9], [0.2, np.nan], [1.0, 0.3]])
    got = TreeShapExplainer(model).contributions(rows)
    expected = np.array([_shapley(model, row) for row in rows])
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


def test_features_no_tree_splits_on_get_zero(ensemble: TreeEnsemble) -> None:
    trees = [t.with_leaf_covers(np.arange(1.0, t.num_leaves + 1)) for t in ensemble.trees]
    covered_model = TreeEnsemble(3, trees, ensemble.base_score)  # feature 2 is never split on
    got = TreeShapExplainer(covered_model).contributions(np.array([[0.1, 0.9, 5.0]]))
    assert got[0, 2] == 0.0
    assert got[0, :2].any()


def test_dump_without_covers_says_how_to_fix(ensemble: TreeEnsemble) -> None:
    explainer = TreeShapExplainer(ensemble)
    assert not explainer.available
    with pytest.raises(ExplainUnavailable, match=r"node covers.*ltr convert"):
        explainer.contributions(np.zeros((1, 2)))


def test_covers_survive_the_json_round_trip(ensemble: TreeEnsemble) -> None:
    trees = [t.with_leaf_covers(np.arange(1.0, t.num_leaves + 1)) for t in ensemble.trees]
    model = TreeEnsemble(2, trees, ensemble.base_score)
    back = TreeEnsemble.from_json_bytes(model.to_json_bytes())
    assert back.has_covers
    x = np.array([[0.1, 0.9], [np.nan, 0.2]])
    np.testing.assert_array_equal(
        TreeShapExplainer(back).contributions(x), TreeShapExplainer(model).contributions(x)
    )


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda t: t.update(cover=[1.0]), "cover and leaf_cover come together"),
        (lambda t: t.update(cover=[1.0, 2.0], leaf_cover=[1.0, 1.0]), "cover has 2 entries"),
        (lambda t: t.update(cover=[2.0], leaf_cover=[1.0]), "leaf_cover has 1 entries"),
        (lambda t: t.update(cover=[2.0], leaf_cover=[-1.0, 3.0]), "finite and non-negative"),
    ],
)
def test_bad_covers_are_refused(ensemble: TreeEnsemble, mutate, message: str) -> None:
    from app.artifacts.tree_dump import TreeDumpError

    doc = orjson.loads(ensemble.to_json_bytes())
    mutate(doc["trees"][0])
    with pytest.raises(TreeDumpError, match=message):
        TreeEnsemble.from_json_bytes(orjson.dumps(doc))


def test_serving_without_explaining_never_imports_the_kernel(
    ensemble: TreeEnsemble, tmp_path
) -> None:
    """Model loading must not pay for numba: it is imported on the first explanation only."""
    import subprocess
    import sys

    dump = tmp_path / "model.json"
    trees = [t.with_leaf_covers(np.arange(1.0, t.num_leaves + 1)) for t in ensemble.trees]
    dump.write_bytes(TreeEnsemble(2, trees, ensemble.base_score).to_json_bytes())
    code = (
        "import sys, numpy as np\n"
        "import app.main, app.explain.ranked\n"
        "from app.scoring.compiled import CompiledTreeScorer\n"
        "from app.explain.treeshap import TreeShapExplainer\n"
        f"data = open({str(dump)!r}, 'rb').read()\n"
        "CompiledTreeScorer.from_json_bytes(data).score(np.zeros((1, 2), np.float32))\n"
        "assert 'numba' not in sys.modules\n"
        "from app.artifacts.tree_dump import TreeEnsemble\n"
        "TreeShapExplainer(TreeEnsemble.from_json_bytes(data)).contributions(np.zeros((1, 2)))\n"
        "assert 'numba' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_kernel_uses_the_dumps_zero_threshold() -> None:
    from app.artifacts.tree_dump import ZERO_THRESHOLD
    from app.explain import treeshap_kernel

    assert treeshap_kernel.ZERO_THRESHOLD == ZERO_THRESHOLD
