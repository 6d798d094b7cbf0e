from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.artifacts.tree_dump import ZERO_THRESHOLD, Tree, TreeEnsemble
from app.scoring import compiled, reference
from app.scoring.compiled import CompiledTreeScorer
from app.scoring.compiler.bins import INT8, bin_layout
from app.scoring.compiler.nodes import lower_ensemble


def _comb(thresholds: np.ndarray, feature: int = 0, seed: int = 0) -> Tree:
    """A chain of splits, one per threshold, on one feature, with random missing rules."""
    rng = np.random.default_rng(seed)
    n = len(thresholds)
    return Tree(
        split_feature=np.full(n, feature, np.int32),
        threshold=np.asarray(thresholds, np.float64),
        left=np.array([~i for i in range(n)], np.int32),
        right=np.array([*range(1, n), ~n], np.int32),
        default_left=rng.random(n) < 0.5,
        leaf_value=rng.normal(size=n + 1),
        missing_zero=rng.random(n) < 0.3,
    )


def _forest(n_thresholds: int, per_tree: int = 60) -> TreeEnsemble:
    """n distinct thresholds on feature 0 over several trees, a few on feature 1."""
    rng = np.random.default_rng(n_thresholds)
    values = rng.permutation(np.linspace(-3, 3, n_thresholds))
    trees = [_comb(values[i : i + per_tree], seed=i) for i in range(0, n_thresholds, per_tree)]
    trees.append(_comb(np.array([-1.0, 0.0, 1e-36, 2.5]), feature=1, seed=99))
    return TreeEnsemble(2, trees, base_score=0.25)


def _rows_around(ensemble: TreeEnsemble, n: int = 2000, seed: int = 1) -> np.ndarray:
    """Rows on, just above and just below thresholds, missing values and special values."""
    rng = np.random.default_rng(seed)
    edges = np.concatenate([t.threshold for t in ensemble.trees]).astype(np.float32)
    near = np.concatenate(
        [edges, np.nextafter(edges, np.float32(np.inf)), np.nextafter(edges, np.float32(-np.inf))]
    )
    special = np.array(
        [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-36, -1e-36, ZERO_THRESHOLD, 1e-45], np.float32
    )
    pool = np.concatenate([near, special])
    return rng.choice(pool, size=(n, ensemble.num_features)).astype(np.float32)


@pytest.mark.parametrize("n_thresholds", [1, 2, 200, 255, 256, 700])
def test_int8_codes_while_they_hold_every_threshold(n_thresholds: int) -> None:
    ensemble = _forest(n_thresholds)
    layout = bin_layout(lower_ensemble(ensemble), ensemble.num_features)
    scorer = CompiledTreeScorer(ensemble)
    if n_thresholds <= INT8.max_thresholds:
        assert layout is not None and layout.code is INT8 and scorer.lanes == 32
    else:
        assert layout is None and scorer.lanes == 16  # float compares
    rows = _rows_around(ensemble)
    np.testing.assert_array_equal(scorer.score(rows), reference.predict(ensemble, rows))


def test_more_leaves_in_a_tree_than_codes_keep_float_compares() -> None:
    ensemble = TreeEnsemble(1, [_comb(np.linspace(0, 1, INT8.max_leaves))], 0.0)
    assert bin_layout(lower_ensemble(ensemble), 1) is None


def test_a_feature_gets_one_column_per_missing_rule_it_is_split_with() -> None:
    # The comb's splits mix default directions and missing-as-zero on feature 0.
    ensemble = _forest(40)
    layout = bin_layout(lower_ensemble(ensemble), 2)
    assert layout is not None
    rules = {(c.missing_zero, c.default_left) for c in layout.columns if c.feature == 0}
    assert rules == {(False, False), (False, True), (True, False), (True, True)}
    assert len(layout.columns) == len(set(layout.columns))


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.floats(-1e6, 1e6, allow_nan=False, width=32), min_size=1, max_size=300),
    st.lists(st.floats(width=32), min_size=1, max_size=64),
)
def test_codes_make_the_float_decisions(thresholds: list[float], values: list[float]) -> None:
    # Any thresholds (duplicates, signed zeros) and any float32 inputs, NaN and inf included.
    ensemble = TreeEnsemble(1, [_comb(np.array(thresholds))], 0.0)
    rows = np.array(values + thresholds, np.float32).reshape(-1, 1)
    scorer = CompiledTreeScorer(ensemble)
    np.testing.assert_array_equal(scorer.score(rows), reference.predict(ensemble, rows))


def test_without_avx2_gathers_the_portable_ones_score_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The code for hosts without AVX2 (LLVM's portable gather), built and run on this one.
    monkeypatch.setattr(compiled, "host_has", lambda feature: False)
    ensemble = _forest(120)
    rows = _rows_around(ensemble)
    scorer = CompiledTreeScorer(ensemble)
    assert scorer.lanes == INT8.lanes
    np.testing.assert_array_equal(scorer.score(rows), reference.predict(ensemble, rows))


def test_leaf_numbers_up_to_256_in_one_tree_read_back_unsigned() -> None:
    # Leaf numbers 128-255 wrap to negative int8 codes; the gather must read them unsigned.
    ensemble = TreeEnsemble(1, [_comb(np.linspace(-1, 1, INT8.max_leaves - 1))], 0.0)
    assert ensemble.trees[0].num_leaves == INT8.max_leaves
    scorer = CompiledTreeScorer(ensemble)
    assert scorer.lanes == INT8.lanes
    rows = _rows_around(ensemble)
    np.testing.assert_array_equal(scorer.score(rows), reference.predict(ensemble, rows))
