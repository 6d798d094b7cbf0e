from __future__ import annotations

import re

import lightgbm as lgb
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.artifacts.tree_dump import ZERO_THRESHOLD, TreeEnsemble
from app.scoring.reference import predict
from tests.support.lightgbm_models import ZERO_BAND, neighbours
from trainer.convert import ModelFormatError, convert_lightgbm
from trainer.data.dataset import RankingDataset
from trainer.data.letor import read_letor
from trainer.export import scores_match

from .conftest import (
    MQ2008_FOLD1,
    assert_same_ranking,
    ranker_model_file,
    truncation_offsets,
    with_missing,
)

# One thread: OpenMP spinning on a busy shared machine makes more threads far slower here.
BASE = {
    "objective": "lambdarank",
    "num_leaves": 15,
    "min_data_in_leaf": 10,
    "verbose": -1,
    "num_threads": 1,
}


def train(data: RankingDataset, rounds: int = 30, **params: object) -> lgb.Booster:
    ds = lgb.Dataset(data.features, data.labels, group=data.group_sizes, params={"verbose": -1})
    return lgb.train({**BASE, **params}, ds, num_boost_round=rounds)


def missing_types(model_text: str) -> set[int]:
    found: set[int] = set()
    for line in re.findall(r"^decision_type=(.*)$", model_text, flags=re.M):
        found |= {(int(d) >> 2) & 3 for d in line.split()}
    return found


CASES = {
    # no NaN in training: splits get MissingType::None (NaN scores like 0.0)
    "none": (False, {}, 0),
    # NaN in training: MissingType::NaN with a learned default direction
    "nan": (True, {}, 2),
    # zero_as_missing: MissingType::Zero (NaN and 0 take the default direction)
    "zero": (False, {"zero_as_missing": True}, 1),
}


@pytest.mark.parametrize("case", CASES)
def test_scores_equal_booster_predict(case: str, demo_train, demo_test) -> None:
    nan_in_training, params, expected_type = CASES[case]
    data = demo_train
    if nan_in_training:
        feats = with_missing(demo_train.features, seed=1, infinities=False)
        data = RankingDataset(
            feats, demo_train.labels, demo_train.group_offsets, demo_train.query_ids
        )
    booster = train(data, **params)
    text = booster.model_to_string()
    assert expected_type in missing_types(text)
    ensemble = convert_lightgbm(text)
    probe = with_missing(demo_test.features, seed=2)
    ours, theirs = predict(ensemble, probe), np.asarray(booster.predict(probe))
    assert scores_match(ours, theirs, 1e-6)
    assert_same_ranking(ours, theirs, demo_test.group_offsets, tol=1e-9)
    assert ensemble.meta["source"] == "lightgbm"
    assert ensemble.num_features == demo_train.num_features


def test_infinite_thresholds_convert_and_score_from_the_file(demo_train, demo_test) -> None:
    # With few bins and missing values LightGBM splits numbers from NaN at threshold inf.
    feats = with_missing(demo_train.features, seed=3, infinities=False)
    data = RankingDataset(feats, demo_train.labels, demo_train.group_offsets, demo_train.query_ids)
    booster = train(data, rounds=10, max_bin=3)
    text = booster.model_to_string()
    assert re.search(r"^threshold=.*\binf\b", text, flags=re.M)
    ensemble = TreeEnsemble.from_json_bytes(convert_lightgbm(text).to_json_bytes())
    assert np.isinf(np.concatenate([t.threshold for t in ensemble.trees])).any()
    probe = with_missing(demo_test.features, seed=4)
    assert scores_match(predict(ensemble, probe), np.asarray(booster.predict(probe)), 1e-6)


@pytest.fixture(scope="module")
def narrow_model(demo_train) -> tuple[lgb.Booster, TreeEnsemble, np.ndarray]:
    """A model on 12 of the features (rows stay small for hypothesis), NaN and Zero types."""
    feats = with_missing(demo_train.features[:, 90:102], seed=3, infinities=False)
    data = RankingDataset(feats, demo_train.labels, demo_train.group_offsets, demo_train.query_ids)
    booster = train(data, rounds=20)
    ensemble = convert_lightgbm(booster.model_to_string())
    thresholds = np.concatenate([t.threshold for t in ensemble.trees])
    return booster, ensemble, thresholds


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_property_any_row_scores_like_lightgbm(narrow_model, data: st.DataObject) -> None:
    booster, ensemble, thresholds = narrow_model
    n_features = booster.num_feature()
    near_threshold = st.sampled_from(thresholds.tolist()).flatmap(
        lambda t: st.sampled_from([t, np.nextafter(t, -np.inf), np.nextafter(t, np.inf)])
    )
    value = st.one_of(
        near_threshold,
        st.floats(allow_nan=True, allow_infinity=True, width=32),
        st.sampled_from([np.nan, *neighbours(ZERO_BAND)]),
    )
    rows = data.draw(
        st.lists(st.lists(value, min_size=n_features, max_size=n_features), min_size=1, max_size=8)
    )
    features = np.asarray(rows, dtype=np.float64)
    np.testing.assert_array_equal(predict(ensemble, features), booster.predict(features))


def test_single_leaf_trees(demo_train) -> None:
    booster = train(demo_train, rounds=3, min_data_in_leaf=100_000)
    ensemble = convert_lightgbm(booster.model_to_string())
    assert all(t.num_nodes == 0 and t.num_leaves == 1 for t in ensemble.trees)
    np.testing.assert_allclose(
        predict(ensemble, demo_train.features), booster.predict(demo_train.features)
    )


def test_feature_names_from_model_and_override(demo_train) -> None:
    booster = train(demo_train, rounds=2)
    ensemble = convert_lightgbm(booster.model_to_string())
    assert ensemble.meta["feature_names"][:2] == ["Column_0", "Column_1"]
    names = [f"n{i}" for i in range(demo_train.num_features)]
    assert convert_lightgbm(booster.model_to_string(), names).meta["feature_names"] == names
    with pytest.raises(ModelFormatError, match="3 feature names"):
        convert_lightgbm(booster.model_to_string(), ["a", "b", "c"])


def test_refuses_categorical_splits() -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 8, size=(600, 2)).astype(np.float64)
    y = (x[:, 0] % 3 == 0).astype(float) + rng.random(600) * 0.1
    ds = lgb.Dataset(x, y, categorical_feature=[0], params={"verbose": -1})
    booster = lgb.train(
        {
            "objective": "regression",
            "verbose": -1,
            "min_data_per_group": 5,
            "cat_smooth": 1,
            "min_data_in_leaf": 5,
            "num_threads": 1,
        },
        ds,
        num_boost_round=3,
    )
    with pytest.raises(ModelFormatError, match="categorical"):
        convert_lightgbm(booster.model_to_string(), source="cat.txt")


def test_refuses_transformed_objective(demo_train) -> None:
    ds = lgb.Dataset(demo_train.features, (demo_train.labels > 1).astype(float))
    booster = lgb.train({"objective": "binary", "verbose": -1, "num_threads": 1}, ds, 2)
    with pytest.raises(ModelFormatError, match="binary"):
        convert_lightgbm(booster.model_to_string())


def test_refuses_reg_sqrt(demo_train) -> None:
    ds = lgb.Dataset(demo_train.features, demo_train.labels, params={"verbose": -1})
    params = {"objective": "regression", "reg_sqrt": True, "verbose": -1, "num_threads": 1}
    booster = lgb.train(params, ds, 2)
    assert "objective=regression sqrt" in booster.model_to_string()
    with pytest.raises(ModelFormatError, match="reg_sqrt"):
        convert_lightgbm(booster.model_to_string())


def test_refuses_linear_trees(demo_train) -> None:
    ds = lgb.Dataset(demo_train.features[:, :20], demo_train.labels, params={"verbose": -1})
    booster = lgb.train(
        {"objective": "regression", "linear_tree": True, "verbose": -1, "num_threads": 1},
        ds,
        num_boost_round=2,
    )
    with pytest.raises(ModelFormatError, match="linear trees"):
        convert_lightgbm(booster.model_to_string())


@pytest.mark.parametrize(
    "text, message",
    [
        ("hello world", "not a LightGBM text model"),
        ("tree\nversion=v4\nmax_feature_idx=x\nend of trees\n", "not an integer"),
        ("tree\nversion=v4\nmax_feature_idx=3\nend of trees\n", "no trees"),
        (
            "tree\nversion=v4\nmax_feature_idx=3\nTree=0\nnum_leaves=2\nsplit_feature=0\n"
            "threshold=0.5\ndecision_type=2\nleft_child=-1\nright_child=-2\nend of trees\n",
            r"m\.txt:4: missing leaf",
        ),
        (
            "tree\nversion=v4\nmax_feature_idx=3\nTree=0\nnum_leaves=2\nsplit_feature=7\n"
            "threshold=0.5\ndecision_type=2\nleft_child=-1\nright_child=-2\nleaf_value=1 2\n"
            "end of trees\n",
            "split feature out of range",
        ),
    ],
)
def test_bad_model_text(text: str, message: str) -> None:
    with pytest.raises(ModelFormatError, match=message):
        convert_lightgbm(text, source="m.txt")


def test_hand_written_missing_types() -> None:
    """decision_type bits by hand: None (NaN as 0.0), Zero and NaN with default right."""
    text = (
        "tree\nversion=v4\nmax_feature_idx=0\nobjective=regression\nTree=0\nnum_leaves=2\n"
        "split_feature=0\nthreshold={t}\ndecision_type={d}\nleft_child=-1\nright_child=-2\n"
        "leaf_value=1 2\nshrinkage=1\nend of trees\n"
    )
    x = np.array([[np.nan], [0.0], [0.2], [-0.2]])
    none_pos = convert_lightgbm(text.format(t=0.1, d=2))  # default-left bit set but ignored
    assert predict(none_pos, x).tolist() == [1, 1, 2, 1]
    none_neg = convert_lightgbm(text.format(t=-0.1, d=2))
    assert predict(none_neg, x).tolist() == [2, 2, 2, 1]
    zero_right = convert_lightgbm(text.format(t=0.1, d=4))
    assert predict(zero_right, x).tolist() == [2, 2, 2, 1]
    nan_right = convert_lightgbm(text.format(t=0.1, d=8))
    assert predict(nan_right, x).tolist() == [2, 1, 2, 1]


@pytest.mark.parametrize("decision", [0, 2, 4, 6, 8, 10])
@pytest.mark.parametrize("threshold", [-ZERO_THRESHOLD, -1e-35, -1e-36, 0.0, 1e-36, ZERO_THRESHOLD])
def test_thresholds_in_the_zero_band(threshold: float, decision: int) -> None:
    """LightGBM reads |x| <= kZeroThreshold as 0.0 before any split: a threshold inside the band
    decides as 0.0 <= t for every value in it (LightGBM itself loads the hand-written model)."""
    text = (
        "tree\nversion=v4\nnum_class=1\nnum_tree_per_iteration=1\nlabel_index=0\n"
        "max_feature_idx=0\nobjective=regression\nfeature_names=x\nfeature_infos=none\n"
        f"tree_sizes=0\n\nTree=0\nnum_leaves=2\nnum_cat=0\nsplit_feature=0\n"
        f"threshold={threshold!r}\ndecision_type={decision}\nleft_child=-1\nright_child=-2\n"
        "leaf_value=1 2\nshrinkage=1\n\n\nend of trees\n"
    )
    x = np.array([[v] for v in [np.nan, *neighbours(ZERO_BAND), 1.0, -1.0]])
    expected = lgb.Booster(model_str=text).predict(x)
    np.testing.assert_array_equal(predict(convert_lightgbm(text), x), expected)
    assert len(set(expected[x[:, 0] == 0.0])) == 1


@pytest.mark.skipif(not MQ2008_FOLD1.is_dir(), reason="../shared/datasets is not available")
def test_mq2008_fold1() -> None:
    train_set = read_letor(MQ2008_FOLD1 / "train.txt")
    test_set = read_letor(MQ2008_FOLD1 / "test.txt", num_features=train_set.num_features)
    for params in ({}, {"zero_as_missing": True}):
        booster = train(train_set, rounds=50, num_leaves=31, **params)
        ensemble = convert_lightgbm(booster.model_to_string())
        probe = with_missing(test_set.features, seed=4)
        ours, theirs = predict(ensemble, probe), np.asarray(booster.predict(probe))
        assert scores_match(ours, theirs, 1e-6)
        assert_same_ranking(ours, theirs, test_set.group_offsets, tol=1e-9)


@pytest.fixture(scope="module")
def ranker_model(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return ranker_model_file(tmp_path_factory.mktemp("lgb") / "lgb.txt").read_bytes()


def test_truncated_model_is_refused_with_its_line(ranker_model: bytes) -> None:
    """LightGBM's loader aborts the process on these, so the parser must catch every cut."""
    for cut in truncation_offsets(ranker_model):
        text = ranker_model[:cut].decode()
        lines = len(text.splitlines())
        with pytest.raises(ModelFormatError, match=rf"^lgb\.txt:{lines}: truncated model"):
            convert_lightgbm(text, source="lgb.txt")
    assert len(convert_lightgbm(ranker_model.decode()).trees) == 20


def test_tree_sizes_must_match_the_blocks(ranker_model: bytes) -> None:
    text = ranker_model.decode()
    start, end = text.index("Tree=3\n"), text.index("Tree=4\n")
    with pytest.raises(ModelFormatError, match="tree_sizes= lists 20 trees, the file has 19"):
        convert_lightgbm(text[:start] + text[end:], source="lgb.txt")
    shifted = text.replace("Tree=5\n", "Tree=5\n\n", 1)  # Tree=6 now starts one byte late
    with pytest.raises(ModelFormatError, match=r"^lgb\.txt:\d+: this tree starts at byte"):
        convert_lightgbm(shifted, source="lgb.txt")
