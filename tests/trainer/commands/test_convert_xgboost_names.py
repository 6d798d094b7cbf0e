"""`ltr convert --from xgboost` on models that carry feature names (pandas fit, named DMatrix):
XGBoost refuses to score an unnamed DMatrix with them, which used to crash the verification."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xgboost as xgb
from typer.testing import CliRunner

from app.artifacts.store import load_version
from app.artifacts.tree_dump import TreeEnsemble
from app.scoring.reference import predict
from trainer.cli import app

from .conftest import one_error_line

NAMES = ["price", "rating", "clicks", "age"]


def _frame(seed: int, queries: int = 30, per_query: int = 10) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    n = queries * per_query
    frame = pd.DataFrame(rng.random((n, len(NAMES))), columns=NAMES)
    frame.insert(0, "label", rng.integers(0, 4, n))
    frame.insert(0, "qid", np.repeat(np.arange(queries), per_query))
    return frame


def _dataframe_ranker(path: Path) -> xgb.Booster:
    """The common way: XGBRanker fitted on a DataFrame with named columns."""
    train = _frame(0)
    ranker = xgb.XGBRanker(objective="rank:ndcg", n_estimators=15, max_depth=3, n_jobs=1)
    ranker.fit(train[NAMES], train["label"], qid=train["qid"])
    booster = ranker.get_booster()
    booster.save_model(str(path))
    return booster


def _named_dmatrix(path: Path) -> xgb.Booster:
    train = _frame(1)
    dm = xgb.DMatrix(train[NAMES].to_numpy(), label=train["label"], feature_names=NAMES)
    dm.set_group(train.groupby("qid", sort=False).size().to_numpy())
    params = {"objective": "rank:ndcg", "max_depth": 4, "nthread": 1}
    booster = xgb.train(params, dm, num_boost_round=15)
    booster.save_model(str(path))
    return booster


def _convert_args(model: Path, out: Path) -> list[str]:
    return ["convert", str(model), "--from", "xgboost", "--out", str(out)]


def _converted(out: Path) -> TreeEnsemble:
    return TreeEnsemble.from_json_bytes(load_version(out).files["model.json"])


@pytest.mark.parametrize("make", [_dataframe_ranker, _named_dmatrix])
@pytest.mark.parametrize("with_data", [False, True])
def test_named_model_converts_and_scores_as_xgboost(
    runner: CliRunner, tmp_path: Path, make: Callable[[Path], xgb.Booster], with_data: bool
) -> None:
    model = tmp_path / "model.json"
    booster = make(model)
    valid = _frame(2)
    data = tmp_path / "valid.parquet"
    valid.to_parquet(data)
    out = tmp_path / "v1"
    extra = ["--data", str(data)] if with_data else []
    result = runner.invoke(app, [*_convert_args(model, out), *extra])
    assert result.exit_code == 0, result.stderr
    # Without --feature-names the manifest takes the model's own names.
    assert load_version(out).manifest.feature_names == NAMES
    rows = valid[NAMES].to_numpy(dtype=np.float32)
    theirs = booster.predict(xgb.DMatrix(rows, feature_names=NAMES), output_margin=True)
    assert np.allclose(predict(_converted(out), rows), theirs, rtol=1e-5, atol=1e-6)


def test_user_names_differing_from_the_model_still_verify(
    runner: CliRunner, tmp_path: Path
) -> None:
    model = tmp_path / "model.json"
    _dataframe_ranker(model)
    out = tmp_path / "v1"
    result = runner.invoke(app, [*_convert_args(model, out), "--feature-names", "a,b,c,d"])
    assert result.exit_code == 0, result.stderr
    assert load_version(out).manifest.feature_names == ["a", "b", "c", "d"]


def test_library_refusing_the_rows_is_one_error_line(runner: CliRunner, tmp_path: Path) -> None:
    """A model whose names XGBoost itself rejects (duplicates) fails in one line, not a
    traceback, and writes nothing."""
    model = tmp_path / "model.json"
    _named_dmatrix(model)
    doctored = model.read_text().replace('"clicks"', '"price"')
    model.write_text(doctored)
    out = tmp_path / "v1"
    result = runner.invoke(app, [*_convert_args(model, out), "--feature-names", "a,b,c,d"])
    assert result.exit_code == 2
    line = one_error_line(result.stderr)
    assert str(model) in line and "xgboost" in line
    assert not out.exists()
