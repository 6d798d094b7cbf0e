from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import lightgbm as lgb
import numpy as np
import pytest
import xgboost as xgb
from typer.testing import CliRunner

from app.artifacts.store import load_version
from app.artifacts.tree_dump import ZERO_THRESHOLD, TreeEnsemble
from app.scoring.reference import predict
from tests.support.lightgbm_models import split_thresholds, zero_band_booster
from tests.trainer.convert.conftest import ranker_model_file
from trainer.cli import app
from trainer.commands.convert import probe_features
from trainer.convert import convert_lightgbm
from trainer.data.loader import load_dataset

from .conftest import TEST, TRAIN, one_error_line


def loaded(path: Path) -> TreeEnsemble:
    return TreeEnsemble.from_json_bytes(load_version(path).files["model.json"])


def test_lightgbm_to_version(runner: CliRunner, lightgbm_model_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "v1"
    result = runner.invoke(
        app,
        ["convert", "--from", "lightgbm", str(lightgbm_model_file), "--out", str(out), "--json"],
    )
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert (summary["version"], summary["engine"], summary["trees"]) == ("v1", "lightgbm", 10)
    manifest = load_version(out).manifest
    # Trained on an array: LightGBM's own Column_0.. name nothing the caller has (README).
    assert manifest.feature_names[:2] == ["f1", "f2"]
    assert "LightGBM's own Column_0" in result.stderr
    assert manifest.training["objective"] == "lambdarank"
    test = load_dataset(TEST, num_features=300)
    booster = lgb.Booster(model_file=str(lightgbm_model_file))
    np.testing.assert_allclose(
        predict(loaded(out), test.features), booster.predict(test.features), rtol=1e-12, atol=1e-12
    )


def test_feature_names_and_data_metrics(
    runner: CliRunner, lightgbm_model_file: Path, tmp_path: Path
) -> None:
    names_file = tmp_path / "names.txt"
    names_file.write_text("\n".join(f"feat{i}" for i in range(300)) + "\n")
    out = tmp_path / "v2"
    result = runner.invoke(
        app,
        [
            "convert",
            "--from",
            "lightgbm",
            str(lightgbm_model_file),
            "--out",
            str(out),
            "--feature-names",
            f"@{names_file}",
            "--data",
            str(TEST),
            "--name",
            "imported",
        ],
    )
    assert result.exit_code == 0, result.stderr
    manifest = load_version(out).manifest
    assert manifest.name == "imported" and manifest.feature_names[299] == "feat299"
    assert 0 < manifest.metrics["ndcg@10"]["value"] <= 1
    assert "verified on 768 rows" in result.stdout
    result = runner.invoke(
        app,
        [
            "convert",
            "--from",
            "lightgbm",
            str(lightgbm_model_file),
            "--out",
            str(tmp_path / "v3"),
            "--feature-names",
            "a,b",
        ],
    )
    assert result.exit_code == 2
    assert "2 feature names for a model of 300" in one_error_line(result.stderr)


def test_xgboost_to_version(runner: CliRunner, tmp_path: Path) -> None:
    train = load_dataset(TRAIN)
    dm = xgb.DMatrix(train.features, train.labels)
    dm.set_group(train.group_sizes)
    booster = xgb.train({"objective": "rank:ndcg", "max_depth": 4, "nthread": 1}, dm, 10)
    model = tmp_path / "model.json"
    booster.save_model(str(model))
    out = tmp_path / "x1"
    result = runner.invoke(
        app, ["convert", "--from", "xgboost", str(model), "--out", str(out), "--data", str(TEST)]
    )
    assert result.exit_code == 0, result.stderr
    test = load_dataset(TEST, num_features=300)
    theirs = booster.predict(xgb.DMatrix(test.features))
    ours = predict(loaded(out), test.features)
    assert np.max(np.abs(ours - theirs)) <= 1e-6 * np.max(np.abs(theirs))
    assert load_version(out).manifest.feature_names[0] == "f1"


def test_xgboost_early_stopping_is_named(runner: CliRunner, tmp_path: Path) -> None:
    train, test = load_dataset(TRAIN), load_dataset(TEST, num_features=300)
    ranker = xgb.XGBRanker(
        objective="rank:ndcg", max_depth=3, n_estimators=6, early_stopping_rounds=1, n_jobs=1
    )
    qid = np.repeat(np.arange(train.num_queries), train.group_sizes)
    ranker.fit(
        train.features,
        train.labels,
        qid=qid,
        eval_set=[(train.features, train.labels.max() - train.labels)],  # worse each round
        eval_qid=[qid],
        verbose=False,
    )
    assert ranker.best_iteration + 1 < 6
    model = tmp_path / "model.json"
    ranker.save_model(str(model))
    out = tmp_path / "x1"
    result = runner.invoke(app, ["convert", "--from", "xgboost", str(model), "--out", str(out)])
    assert result.exit_code == 0, result.stderr
    assert f"best_iteration={ranker.best_iteration}" in result.stderr
    # Every round converted, as Booster.predict scores (XGBRanker.predict stops early).
    booster = ranker.get_booster()
    rows = test.features[:200]
    theirs = booster.predict(xgb.DMatrix(rows), iteration_range=(0, 0), output_margin=True)
    assert np.allclose(predict(loaded(out), rows), theirs, rtol=1e-5, atol=1e-6)
    assert not np.allclose(ranker.predict(rows, output_margin=True), theirs, rtol=1e-5)


@pytest.mark.slow
def test_long_xgboost_model_beyond_float32_rounding(runner: CliRunner, tmp_path: Path) -> None:
    """2,000 trees: XGBoost's float32 running sum drifts more than 1e-6 from the dump's
    float64 sum, yet the conversion is exact (checked against the same float32 sum)."""
    train = load_dataset(TRAIN)
    dm = xgb.DMatrix(train.features, train.labels)
    dm.set_group(train.group_sizes)
    booster = xgb.train({"objective": "rank:ndcg", "max_depth": 3, "nthread": 1}, dm, 4)
    doc = json.loads(bytes(booster.save_raw("json")))
    model = doc["learner"]["gradient_booster"]["model"]
    n = 2000
    model["trees"] = [dict(model["trees"][i % 4], id=i) for i in range(n)]
    model["tree_info"] = [0] * n
    model["iteration_indptr"] = list(range(n + 1))
    model["gbtree_model_param"]["num_trees"] = str(n)
    path = tmp_path / "long.json"
    path.write_text(json.dumps(doc))
    result = runner.invoke(
        app, ["convert", "--from", "xgboost", str(path), "--out", str(tmp_path / "x2"), "--json"]
    )
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["trees"] == n and 1e-6 < summary["max_rel_diff"] < 1e-4


def test_a_threshold_beyond_float32_probes_without_a_warning(lightgbm_model_file: Path) -> None:
    """A trial: convert printed numpy's "overflow encountered in cast" for models with 1e300
    thresholds (warnings are errors here)."""
    ensemble = convert_lightgbm(lightgbm_model_file.read_text())
    ensemble.trees[0].threshold[0] = 1e300
    probe = probe_features(ensemble, 200, infinities=False)
    assert np.isinf(probe[:, ensemble.trees[0].split_feature[0]]).any()


def test_probe_rows_reach_both_sides_of_every_split(lightgbm_model_file: Path) -> None:
    ensemble = convert_lightgbm(lightgbm_model_file.read_text())
    probe = probe_features(ensemble, 2000, infinities=True)
    assert probe.dtype == np.float32 and np.isnan(probe).any() and np.isinf(probe).any()
    from app.scoring.reference import tree_leaf_index

    for tree in ensemble.trees:
        assert np.unique(tree_leaf_index(tree, probe)).size == tree.num_leaves


@pytest.mark.parametrize(
    "args, message",
    [
        (["--from", "catboost"], "--from 'catboost': choose lightgbm or xgboost"),
        (["--from", "xgboost"], "not JSON"),
        (
            [
                "--from",
                "lightgbm",
                "--feature-names",
                ",".join(["a", *(f"x{i}" for i in range(298)), "a"]),
            ],
            "--feature-names: feature name 'a' is given twice (features 1 and 300)",
        ),
        (
            ["--from", "lightgbm", "--feature-names", "a,,b"],
            "--feature-names: name 2 of 3 is empty",
        ),
    ],
)
def test_errors(
    runner: CliRunner, lightgbm_model_file: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    result = runner.invoke(
        app, ["convert", str(lightgbm_model_file), "--out", str(tmp_path / "v"), *args]
    )
    assert result.exit_code == 2 and message in one_error_line(result.stderr)
    assert not (tmp_path / "v").exists()


def test_missing_and_garbage_files(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        ["convert", "--from", "lightgbm", str(tmp_path / "nope.txt"), "--out", str(tmp_path / "v")],
    )
    assert result.exit_code == 2 and "nope.txt" in one_error_line(result.stderr)
    garbage = tmp_path / "garbage.txt"
    garbage.write_bytes(b"\xff\xfe not a model")
    result = runner.invoke(
        app, ["convert", "--from", "lightgbm", str(garbage), "--out", str(tmp_path / "v")]
    )
    assert result.exit_code == 2 and "not a LightGBM text model" in one_error_line(result.stderr)


def ltr_command() -> list[str]:
    script = Path(sys.executable).parent / "ltr"
    return [str(script)] if script.exists() else [sys.executable, "-m", "trainer"]


@pytest.mark.slow
def test_real_console_script(runner: CliRunner, lightgbm_model_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "v9"
    convert = runner.invoke(
        app, ["convert", "--from", "lightgbm", str(lightgbm_model_file), "--out", str(out)]
    )
    assert convert.exit_code == 0, convert.stderr
    env = {**os.environ, "NO_COLOR": "1"}
    evaluate = subprocess.run(
        [*ltr_command(), "evaluate", "--model", str(out), "--data", str(TEST), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert evaluate.returncode == 0, evaluate.stderr
    assert json.loads(evaluate.stdout)["documents"] == 768
    failing = subprocess.run(
        [
            *ltr_command(),
            "train",
            "--train",
            str(TRAIN),
            "--out",
            str(tmp_path / "v10"),
            "--engine",
            "nope",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert failing.returncode == 2
    assert (
        one_error_line(failing.stderr)
        == "error: unknown engine 'nope' (choose one of native, lightgbm, lightgbm-dask, dnn)"
    )


# ../shared beside the main checkout, or beside the folder of worktrees.
SHARED_REGRESSION = (
    next(
        (
            path
            for up in (1, 2)
            if (path := Path(__file__).parents[3 + up] / "shared" / "regressions").is_dir()
        ),
        Path("../shared/regressions"),
    )
    / "lightgbm-lambdarank-100trees.txt"
)


def test_plain_lambdarank_model_with_zero_band_splits(runner: CliRunner, tmp_path: Path) -> None:
    """Regression: a lambdarank model with splits at -kZeroThreshold was refused without --data
    (the probe's x = -float32(1e-35) went left in the dump, right in LightGBM)."""
    booster = zero_band_booster("none", rounds=100)
    text = booster.model_to_string()
    assert -ZERO_THRESHOLD in {t for t, _ in split_thresholds(text)}
    model = tmp_path / "model.txt"
    model.write_text(text)
    out = tmp_path / "v1"
    args = ["convert", "--from", "lightgbm", str(model), "--out", str(out), "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["max_rel_diff"] == 0.0
    x = np.full((1, booster.num_feature()), 1.0, dtype=np.float32)
    x[0, 0] = -np.float32(ZERO_THRESHOLD)
    np.testing.assert_array_equal(predict(loaded(out), x), booster.predict(x))


@pytest.mark.skipif(
    not SHARED_REGRESSION.is_file(), reason="../shared/regressions is not available"
)
def test_shared_regression_model(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "v1"
    args = ["convert", "--from", "lightgbm", str(SHARED_REGRESSION), "--out", str(out), "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["max_rel_diff"] == 0.0


def test_truncated_lightgbm_model_is_one_error_line(tmp_path: Path) -> None:
    """In a child process: LightGBM's loader aborts the process (rc 134) on a cut model."""
    model = ranker_model_file(tmp_path / "lgb.txt").read_bytes()
    for cut in (2000, model.index(b"end of trees")):
        cut_file = tmp_path / f"lgb_{cut}.txt"
        cut_file.write_bytes(model[:cut])
        out = str(tmp_path / "v1")
        run = subprocess.run(
            [*ltr_command(), "convert", str(cut_file), "--from", "lightgbm", "--out", out],
            capture_output=True,
            text=True,
            env={**os.environ, "NO_COLOR": "1"},
            timeout=120,
        )
        assert run.returncode == 2, run.stderr[-2000:]
        lines = len(model[:cut].splitlines())
        assert one_error_line(run.stderr) == (
            f"error: {cut_file}:{lines}: truncated model: the file ends in Tree="
            f"{model[:cut].count(b'Tree=') - 1}, with no 'end of trees' line"
        )
        assert not (tmp_path / "v1").exists()


def test_data_directory_is_named_as_one(
    runner: CliRunner, lightgbm_model_file: Path, tmp_path: Path
) -> None:
    args = ["convert", "--from", "lightgbm", str(lightgbm_model_file), "--out", str(tmp_path / "v")]
    result = runner.invoke(app, [*args, "--data", str(tmp_path)])
    assert result.exit_code == 2
    assert one_error_line(result.stderr) == (
        f"error: {tmp_path}: is a directory: give a LETOR text file or a Parquet file"
    )
