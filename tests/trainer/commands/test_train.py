from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.artifacts.store import load_version
from trainer.cli import app

from .conftest import TEST, TRAIN, one_error_line

FAST = ["--num-trees", "5", "--num-leaves", "7", "--threads", "1"]


def test_native_json(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "models" / "v1"
    args = ["train", "--train", str(TRAIN), "--valid", str(TEST), "--out", str(out), *FAST]
    result = runner.invoke(app, [*args, "--json", "--name", "demo"])
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["model_dir"] == str(out) and summary["version"] == "v1"
    assert summary["engine"] == "native" and summary["name"] == "demo"
    assert set(summary["metrics"]) >= {"ndcg@1", "ndcg@10", "map", "mrr", "err@10", "queries"}
    manifest = load_version(out).manifest
    assert manifest.name == "demo" and manifest.training["params"]["num_trees"] == 5
    # not a terminal: plain progress lines on stderr
    assert "iter 1/5 train ndcg@10 " in result.stderr and " valid ndcg@10 " in result.stderr


def test_lightgbm_with_config_and_flag_override(runner: CliRunner, tmp_path: Path) -> None:
    config = tmp_path / "params.toml"
    config.write_text('engine = "lightgbm"\nnum_trees = 4\nnum_leaves = 31\nthreads = 1\n')
    out = tmp_path / "v2"
    result = runner.invoke(
        app,
        [
            "train",
            "--train",
            str(TRAIN),
            "--config",
            str(config),
            "--num-leaves",
            "5",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines()[0] == str(out)
    assert "train:" in result.stdout  # no --valid: metrics on the training data
    training = load_version(out).manifest.training
    assert training["engine"] == "lightgbm"
    assert (training["params"]["num_trees"], training["params"]["num_leaves"]) == (4, 5)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--engine", "catboost"], "unknown engine 'catboost'"),
        (["--engine", "dnn", "--num-leaves", "7"], "--num-leaves does not apply to --engine dnn"),
        (["--num-leaves", "1"], "--num-leaves: Input should be greater than or equal to 2"),
        (["--hidden", "a,b", "--engine", "dnn"], "--hidden: expected comma-separated integers"),
    ],
)
def test_bad_options(runner: CliRunner, tmp_path: Path, extra: list[str], message: str) -> None:
    result = runner.invoke(
        app, ["train", "--train", str(TRAIN), "--out", str(tmp_path / "v"), *extra]
    )
    assert result.exit_code == 2
    assert message in one_error_line(result.stderr)
    assert not (tmp_path / "v").exists()


def test_bad_config_file(runner: CliRunner, tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("num_trees = 3\nlearning_rat = 0.1\n")
    result = runner.invoke(
        app, ["train", "--train", str(TRAIN), "--config", str(config), "--out", str(tmp_path / "v")]
    )
    assert result.exit_code == 2
    assert f"{config}:2: unknown key 'learning_rat'" in one_error_line(result.stderr)


def test_bad_data_file_names_file_and_line(runner: CliRunner, tmp_path: Path) -> None:
    data = tmp_path / "bad.txt"
    data.write_text("1 qid:1 1:0.5\nx qid:1 1:0.25\n")
    result = runner.invoke(app, ["train", "--train", str(data), "--out", str(tmp_path / "v")])
    assert result.exit_code == 2
    assert one_error_line(result.stderr).startswith(f"error: {data}:2: ")


def test_missing_file_and_existing_out(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["train", "--train", str(tmp_path / "nope.txt"), "--out", str(tmp_path / "v")]
    )
    assert result.exit_code == 2 and "nope.txt" in one_error_line(result.stderr)
    (tmp_path / "v").mkdir()
    result = runner.invoke(
        app, ["train", "--train", str(TRAIN), "--out", str(tmp_path / "v"), *FAST]
    )
    assert result.exit_code == 2 and "already exists" in one_error_line(result.stderr)
    bad_name = tmp_path / "bad name"
    result = runner.invoke(app, ["train", "--train", str(TRAIN), "--out", str(bad_name), *FAST])
    assert result.exit_code == 2 and "version id" in one_error_line(result.stderr)


@pytest.mark.slow
def test_dnn_engine_dispatch(runner: CliRunner, tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the dnn extra (torch) is not installed")
    out = tmp_path / "dnn1"
    result = runner.invoke(
        app,
        [
            "train",
            "--engine",
            "dnn",
            "--train",
            str(TRAIN),
            "--valid",
            str(TEST),
            "--out",
            str(out),
            "--epochs",
            "2",
            "--hidden",
            "8",
            "--threads",
            "1",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["kind"] == "lambdadnn" and summary["engine"] == "dnn"
    assert load_version(out).manifest.kind == "lambdadnn"
    assert "epoch 1/2" in result.stderr
    # a bad user-cluster config is one clear line too
    config = tmp_path / "clusters.toml"
    config.write_text("")
    result = runner.invoke(
        app,
        [
            "train",
            "--engine",
            "dnn",
            "--train",
            str(TRAIN),
            "--out",
            str(tmp_path / "dnn2"),
            "--cluster-config",
            str(config),
        ],
    )
    assert result.exit_code == 2
    assert str(config) in one_error_line(result.stderr)  # names the bad cluster config
