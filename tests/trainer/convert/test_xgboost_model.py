from __future__ import annotations

import json

import numpy as np
import pytest
import xgboost as xgb
from hypothesis import given, settings
from hypothesis import strategies as st

from app.scoring.reference import predict
from trainer.convert import ModelFormatError, convert_xgboost
from trainer.data.dataset import RankingDataset
from trainer.data.letor import read_letor
from trainer.export import scores_match

from .conftest import MQ2008_FOLD1, assert_same_ranking, with_missing

# XGBoost sums leaf values in float32; our float64 sum differs by float32 rounding of the total.
F32_RANK_TOL = 1e-5


def train(data: RankingDataset, rounds: int = 30, **params: object) -> xgb.Booster:
    dm = xgb.DMatrix(data.features, data.labels, missing=np.nan)
    dm.set_group(data.group_sizes)
    base = {"objective": "rank:ndcg", "max_depth": 5, "eta": 0.3, "nthread": 1}
    return xgb.train({**base, **params}, dm, num_boost_round=rounds)


def model_json(booster: xgb.Booster) -> bytes:
    return bytes(booster.save_raw("json"))


def big_instead_of_inf(features: np.ndarray) -> np.ndarray:
    """XGBoost refuses ±inf input; the float32 extremes exercise the same comparisons."""
    out = features.copy()
    out[np.isposinf(out)] = np.finfo(np.float32).max
    out[np.isneginf(out)] = -np.finfo(np.float32).max
    return out


@pytest.mark.parametrize("nan_in_training", [False, True])
def test_scores_equal_booster_predict(nan_in_training: bool, demo_train, demo_test) -> None:
    data = demo_train
    if nan_in_training:
        feats = with_missing(demo_train.features, seed=5, infinities=False)
        data = RankingDataset(
            feats, demo_train.labels, demo_train.group_offsets, demo_train.query_ids
        )
    booster = train(data)
    ensemble = convert_xgboost(model_json(booster))
    probe = big_instead_of_inf(with_missing(demo_test.features, seed=6))
    ours, theirs = predict(ensemble, probe), booster.predict(xgb.DMatrix(probe, missing=np.nan))
    assert scores_match(ours, theirs, 1e-6)
    assert_same_ranking(ours, theirs, demo_test.group_offsets, tol=F32_RANK_TOL)
    assert ensemble.meta["objective"] == "rank:ndcg"


def test_float32_accumulation_is_the_only_difference(demo_train, demo_test) -> None:
    booster = train(demo_train, rounds=20)
    ensemble = convert_xgboost(model_json(booster))
    probe = with_missing(demo_test.features, seed=7, infinities=False)
    from app.scoring.reference import tree_leaf_index

    total = np.full(probe.shape[0], np.float32(ensemble.base_score), dtype=np.float32)
    for tree in ensemble.trees:
        total += tree.leaf_value[tree_leaf_index(tree, probe)].astype(np.float32)
    np.testing.assert_array_equal(total, booster.predict(xgb.DMatrix(probe, missing=np.nan)))


@settings(max_examples=200, deadline=None)
@given(
    cond=st.floats(width=32, allow_nan=False, allow_infinity=False),
    x=st.floats(width=32, allow_nan=False, allow_infinity=True),
)
def test_property_threshold_rule(cond: float, x: float) -> None:
    """`x < cond` in float32 is `x <= threshold` in float64 for every float32 x."""
    doc = {
        "learner": {
            "learner_model_param": {"base_score": "[0E0]", "num_feature": "1", "num_class": "0"},
            "objective": {"name": "rank:ndcg"},
            "gradient_booster": {
                "name": "gbtree",
                "model": {
                    "trees": [
                        {
                            "left_children": [1, -1, -1],
                            "right_children": [2, -1, -1],
                            "split_indices": [0, 0, 0],
                            "split_conditions": [cond, 1.0, 2.0],
                            "default_left": [0, 0, 0],
                            "split_type": [0, 0, 0],
                        }
                    ]
                },
            },
        }
    }
    ensemble = convert_xgboost(json.dumps(doc).encode())
    expected = 1.0 if np.float32(x) < np.float32(cond) else 2.0
    assert predict(ensemble, np.array([[x]], dtype=np.float32))[0] == expected


def test_base_score_formats() -> None:
    def doc(base: str) -> bytes:
        tree = {
            "left_children": [-1],
            "right_children": [-1],
            "split_indices": [0],
            "split_conditions": [0.25],
            "default_left": [0],
        }
        return json.dumps(
            {
                "learner": {
                    "learner_model_param": {"base_score": base, "num_feature": "2"},
                    "objective": {"name": "reg:squarederror"},
                    "gradient_booster": {"name": "gbtree", "model": {"trees": [tree]}},
                }
            }
        ).encode()

    assert convert_xgboost(doc("5E-1")).base_score == 0.5
    assert convert_xgboost(doc("[5E-1]")).base_score == 0.5
    assert predict(convert_xgboost(doc("[1.5E0]")), np.zeros((1, 2)))[0] == 1.75
    with pytest.raises(ModelFormatError, match="multi-target"):
        convert_xgboost(doc("[1E0,2E0]"))


@pytest.mark.parametrize("gamma", [5.0, 50.0])
def test_pruned_nodes_and_single_leaf_trees(gamma: float, demo_train, demo_test) -> None:
    booster = train(demo_train, rounds=10, gamma=gamma, max_depth=6, tree_method="exact")
    trees = json.loads(model_json(booster))["learner"]["gradient_booster"]["model"]["trees"]
    assert any(int(t["tree_param"]["num_deleted"]) > 0 for t in trees)  # pruned nodes remain
    ensemble = convert_xgboost(model_json(booster))
    if gamma > 10:
        assert any(t.num_nodes == 0 for t in ensemble.trees)
    probe = with_missing(demo_test.features, seed=8, infinities=False)
    theirs = booster.predict(xgb.DMatrix(probe, missing=np.nan))
    assert scores_match(predict(ensemble, probe), theirs, 1e-6)


def test_refuses_transformed_objective(demo_train) -> None:
    dm = xgb.DMatrix(demo_train.features, (demo_train.labels > 1).astype(float))
    booster = xgb.train({"objective": "binary:logistic", "nthread": 1}, dm, 2)
    with pytest.raises(ModelFormatError, match="binary:logistic"):
        convert_xgboost(model_json(booster), source="b.json")


def test_refuses_categorical_splits() -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 6, size=(400, 1)).astype(np.float32)
    y = (x[:, 0] % 2).astype(float)
    dm = xgb.DMatrix(x, y, feature_types=["c"], enable_categorical=True)
    booster = xgb.train({"tree_method": "hist", "max_cat_to_onehot": 1, "nthread": 1}, dm, 2)
    with pytest.raises(ModelFormatError, match="categorical"):
        convert_xgboost(model_json(booster))


@pytest.mark.parametrize(
    "raw, message",
    [
        (b"\x00\x01binary", "not JSON"),
        (b'{"hello": 1}', "not an XGBoost JSON model"),
    ],
)
def test_bad_files(raw: bytes, message: str) -> None:
    with pytest.raises(ModelFormatError, match=f"m.json: {message}"):
        convert_xgboost(raw, source="m.json")


@pytest.mark.skipif(not MQ2008_FOLD1.is_dir(), reason="../shared/datasets is not available")
def test_mq2008_fold1() -> None:
    train_set = read_letor(MQ2008_FOLD1 / "train.txt")
    test_set = read_letor(MQ2008_FOLD1 / "test.txt", num_features=train_set.num_features)
    booster = train(train_set, rounds=50, max_depth=6, eta=0.1)
    ensemble = convert_xgboost(model_json(booster))
    probe = big_instead_of_inf(with_missing(test_set.features, seed=9))
    ours, theirs = predict(ensemble, probe), booster.predict(xgb.DMatrix(probe, missing=np.nan))
    assert scores_match(ours, theirs, 1e-6)
    assert_same_ranking(ours, theirs, test_set.group_offsets, tol=F32_RANK_TOL)


@pytest.fixture(scope="module")
def small_model() -> xgb.Booster:
    rng = np.random.default_rng(0)
    dm = xgb.DMatrix(rng.random((100, 4)), label=rng.random(100))
    return xgb.train({"objective": "reg:squarederror", "max_depth": 3, "nthread": 1}, dm, 5)


def test_truncated_json_names_line_and_column(small_model: xgb.Booster) -> None:
    raw = model_json(small_model)
    with pytest.raises(ModelFormatError, match=r"^m\.json:1:1501: truncated JSON"):
        convert_xgboost(raw[:1500], source="m.json")
    pretty = json.dumps(json.loads(raw), indent=1).encode()
    cut = pretty[:2000]
    line, column = cut.count(b"\n") + 1, len(cut) - cut.rfind(b"\n")
    with pytest.raises(ModelFormatError, match=rf"^m\.json:{line}:{column}: truncated JSON"):
        convert_xgboost(cut, source="m.json")
    broken = raw.replace(b'"learner":', b'"learner";', 1)
    with pytest.raises(ModelFormatError, match=r"^m\.json:1:\d+: invalid JSON \(Expecting ':'"):
        convert_xgboost(broken, source="m.json")


def test_binary_model_is_still_not_json(small_model: xgb.Booster, tmp_path) -> None:
    small_model.save_model(str(tmp_path / "m.ubj"))
    with pytest.raises(ModelFormatError, match=r"m\.json: not JSON \(save the model with"):
        convert_xgboost((tmp_path / "m.ubj").read_bytes(), source="m.json")
