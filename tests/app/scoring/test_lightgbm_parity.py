"""The compiled scorer against LightGBM itself, through our converter (trainer code in a test)."""

from __future__ import annotations

import lightgbm as lgb
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.artifacts.tree_dump import ZERO_THRESHOLD, TreeEnsemble
from app.scoring import reference
from app.scoring.compiled import CompiledTreeScorer
from tests.support.lightgbm_models import (
    MISSING_TYPES,
    ZERO_BAND,
    neighbours,
    split_thresholds,
    zero_band_booster,
)
from trainer.convert.lightgbm_model import convert_lightgbm


def _data(seed: int, n: int = 600, f: int = 6) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, f)).astype(np.float32)
    x[rng.random((n, f)) < 0.15] = 0.0
    x[:, :3][rng.random((n, 3)) < 0.15] = np.nan  # NaN only in the first half: mixed missing types
    y = np.digitize(np.nan_to_num(x[:, 0]) + x[:, 4] + rng.normal(0, 0.5, n), [-1, 0, 1, 2])
    return x, y.astype(np.float64)


def _probe_rows(x: np.ndarray, model: lgb.Booster) -> np.ndarray:
    """Held-out style rows plus rows sitting exactly on the model's thresholds."""
    dump = model.dump_model()["tree_info"]
    thresholds: list[tuple[int, float]] = []

    def walk(node: dict) -> None:
        if "split_feature" in node:
            thresholds.append((node["split_feature"], float(node["threshold"])))
            walk(node["left_child"])
            walk(node["right_child"])

    for tree in dump:
        walk(tree["tree_structure"])
    rows = [x]
    for i, (feat, thr) in enumerate(thresholds[:200]):
        base = x[i % x.shape[0]].copy()
        for value in (np.float32(thr), np.nextafter(np.float32(thr), np.float32(np.inf))):
            row = base.copy()
            row[feat] = value
            rows.append(row[None, :])
    specials = np.array([np.nan, np.inf, -np.inf, *neighbours(ZERO_BAND)], np.float32)
    rows.append(np.repeat(specials[:, None], x.shape[1], axis=1))
    return np.concatenate(rows).astype(np.float32)


@pytest.mark.parametrize(
    "params",
    [
        {"objective": "lambdarank"},
        {"objective": "lambdarank", "zero_as_missing": True},
        {"objective": "regression", "use_missing": False},
    ],
)
def test_compiled_matches_lightgbm_predict(params: dict) -> None:
    x, y = _data(7)
    group = [30] * (x.shape[0] // 30)
    full = {"num_leaves": 15, "min_data_in_leaf": 5, "verbose": -1, "num_threads": 1, **params}
    booster = lgb.train(full, lgb.Dataset(x, y, group=group), num_boost_round=15)
    ensemble = convert_lightgbm(booster.model_to_string())
    rows = _probe_rows(_data(8, n=300)[0], booster)
    expected = booster.predict(rows, num_threads=1, raw_score=True)
    got = CompiledTreeScorer(ensemble).score(rows)
    np.testing.assert_array_equal(got, expected)  # bit-identical, not merely close
    np.testing.assert_array_equal(got, reference.predict(ensemble, rows))


def _float32(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # thresholds beyond the float32 range become ±inf
        return x.astype(np.float32)


Scorers = tuple[lgb.Booster, TreeEnsemble, CompiledTreeScorer, list[float]]


@pytest.fixture(scope="module", params=list(MISSING_TYPES))
def zero_band_model(request: pytest.FixtureRequest) -> Scorers:
    """A model with splits at ±kZeroThreshold of one missing type, compiled, and its inputs."""
    booster = zero_band_booster(request.param)
    text = booster.model_to_string()
    splits = split_thresholds(text)
    assert MISSING_TYPES[request.param] in {kind for _, kind in splits}
    assert any(abs(t) <= ZERO_THRESHOLD for t, _ in splits)  # the splits this is about
    ensemble = convert_lightgbm(text)
    values = neighbours(ZERO_BAND + sorted({t for t, _ in splits}))
    return booster, ensemble, CompiledTreeScorer(ensemble), values


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_property_zero_band_and_thresholds_bit_identical(
    zero_band_model: Scorers, data: st.DataObject
) -> None:
    """Values at, and one float32 or float64 step around, ±1e-35 (both LightGBM's float32 edge
    and the double), ±0 and every threshold of None, Zero and NaN splits: the compiled scorer
    on float32 rows and the reference on float64 rows both equal `Booster.predict` exactly."""
    booster, ensemble, compiled, values = zero_band_model
    value = st.one_of(
        st.sampled_from(values),
        st.sampled_from([np.nan, np.inf, -np.inf]),
        st.floats(allow_nan=True, allow_infinity=True, width=32),
    )
    n_features = ensemble.num_features
    rows = data.draw(
        st.lists(st.lists(value, min_size=n_features, max_size=n_features), min_size=1, max_size=16)
    )
    x64 = np.asarray(rows, dtype=np.float64)
    np.testing.assert_array_equal(reference.predict(ensemble, x64), booster.predict(x64))
    x32 = _float32(x64)
    expected32 = booster.predict(x32)
    np.testing.assert_array_equal(compiled.score(x32), expected32)
    np.testing.assert_array_equal(reference.predict(ensemble, x32), expected32)


def test_zero_band_every_value_on_every_feature(zero_band_model: Scorers) -> None:
    """The exhaustive version of the property above, one feature at a time on a fixed row."""
    booster, ensemble, compiled, values = zero_band_model
    base = np.ones(ensemble.num_features)
    base[0] = -1.0
    rows = np.repeat(base[None, :], ensemble.num_features * len(values), axis=0)
    for j in range(ensemble.num_features):
        rows[j * len(values) : (j + 1) * len(values), j] = values
    np.testing.assert_array_equal(reference.predict(ensemble, rows), booster.predict(rows))
    rows32 = _float32(rows)
    np.testing.assert_array_equal(compiled.score(rows32), booster.predict(rows32))
