"""TreeSHAP on converted models equals LightGBM's and XGBoost's own contributions
(trainer converters and the libraries in a test; the service never imports them)."""

from __future__ import annotations

import lightgbm as lgb
import numpy as np
import xgboost as xgb
from hypothesis import given, settings
from hypothesis import strategies as st

from app.explain.treeshap import TreeShapExplainer
from trainer.convert.lightgbm_model import convert_lightgbm
from trainer.convert.xgboost_model import convert_xgboost

SPECIALS = [np.nan, 0.0, -0.0, 1e-36, -1e-36, 1e-30, np.inf, -np.inf]
XGB_SPECIALS = [np.nan, 0.0, -0.0, 1e-36, 1e-30, 3e38, -3e38]  # XGBoost refuses infinities


def _training_data(seed: int, n: int = 400, f: int = 5) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, f))
    x[rng.random((n, f)) < 0.15] = 0.0
    x[:, :3][rng.random((n, 3)) < 0.15] = np.nan
    y = np.digitize(np.nan_to_num(x[:, 0]) + x[:, 1] * x[:, 3] + rng.normal(0, 0.5, n), [-1, 0, 1])
    return x, y.astype(np.float64)


def _rows(draw: st.DrawFn, x: np.ndarray, specials: list[float], dtype: type) -> np.ndarray:
    """Training rows with cells replaced by special values (NaN, zeros, infinities)."""
    picks = draw(st.lists(st.integers(0, x.shape[0] - 1), min_size=1, max_size=12))
    rows = x[picks].astype(dtype)
    cells = draw(
        st.lists(
            st.tuples(
                st.integers(0, rows.shape[0] - 1),
                st.integers(0, rows.shape[1] - 1),
                st.sampled_from(specials),
            ),
            max_size=20,
        )
    )
    for r, c, v in cells:
        rows[r, c] = v
    return rows


def _assert_close(got: np.ndarray, expected: np.ndarray, rtol: float) -> None:
    """Equal within rtol of the largest contribution in the row (relative to each would be
    meaningless for contributions that cancel to nearly zero)."""
    assert got.shape == expected.shape
    scale = np.maximum(np.abs(expected).max(axis=1, keepdims=True), 1e-300)
    assert np.all(np.abs(got - expected) <= rtol * scale), np.abs(got - expected).max()


@settings(max_examples=25, deadline=None)
@given(
    st.data(),
    st.integers(0, 10_000),
    st.sampled_from(
        [
            {"objective": "lambdarank"},
            {"objective": "lambdarank", "zero_as_missing": True},
            {"objective": "regression", "use_missing": False},
            {"objective": "regression", "bagging_fraction": 0.7, "bagging_freq": 1},
        ]
    ),
    st.sampled_from([4, 15, 31]),
)
def test_equals_lightgbm_pred_contrib(data: st.DataObject, seed: int, params: dict, leaves: int):
    x, y = _training_data(seed)
    full = {
        "num_leaves": leaves,
        "min_data_in_leaf": 5,
        "verbose": -1,
        "num_threads": 1,
        "seed": seed,
        **params,
    }
    booster = lgb.train(full, lgb.Dataset(x, y, group=[40] * 10), num_boost_round=12)
    rows = _rows(data.draw, x, SPECIALS, np.float64)
    got = TreeShapExplainer(convert_lightgbm(booster.model_to_string())).contributions(rows)
    _assert_close(got, booster.predict(rows, pred_contrib=True, num_threads=1), 1e-9)


@settings(max_examples=20, deadline=None)
@given(
    st.data(),
    st.integers(0, 10_000),
    st.sampled_from(["rank:ndcg", "rank:pairwise", "reg:squarederror"]),
    st.sampled_from([2, 4, 6]),
)
def test_equals_xgboost_pred_contribs(data: st.DataObject, seed: int, objective: str, depth: int):
    x, y = _training_data(seed)
    x = x.astype(np.float32)
    train = xgb.DMatrix(x, y)
    train.set_group([40] * 10)
    params = {"objective": objective, "max_depth": depth, "eta": 0.3, "nthread": 1, "seed": seed}
    booster = xgb.train(params, train, num_boost_round=12)
    rows = _rows(data.draw, x, XGB_SPECIALS, np.float32)
    got = TreeShapExplainer(convert_xgboost(bytes(booster.save_raw("json")))).contributions(rows)
    expected = booster.predict(xgb.DMatrix(rows), pred_contribs=True).astype(np.float64)
    # XGBoost computes in float32: a few float32 roundings per tree of the largest term.
    _assert_close(got, expected, 2e-5)
