"""The compiled scorer against LightGBM itself, through our converter (trainer code in a test)."""

from __future__ import annotations

import lightgbm as lgb
import numpy as np
import pytest

from app.scoring import reference
from app.scoring.compiled import CompiledTreeScorer
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
    specials = np.array([np.nan, 0.0, -0.0, 1e-36, np.inf, -np.inf], np.float32)
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
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(got, reference.predict(ensemble, rows))
