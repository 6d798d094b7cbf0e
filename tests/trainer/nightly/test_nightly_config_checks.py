"""Mistakes in the nightly config are found when it is loaded or before training (hours on
real data), each named by the file and key."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from typer.testing import CliRunner

import trainer.nightly.run as nightly_run
from tests.trainer.nightly.conftest import write_config
from trainer.cli import app
from trainer.commands.errors import CommandError
from trainer.features.set_retention import RetentionError
from trainer.nightly.config import load_config
from trainer.nightly.run import load_data, run_nightly


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "n.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("metric", ["bogus", "queries", "documents", "rescore_max_rel_diff"])
def test_gate_metric_is_a_ranking_quality_key(tmp_path: Path, metric: str) -> None:
    path = _config(tmp_path, f'[gate]\nmetric = "{metric}"\n')
    with pytest.raises(CommandError, match=r"n\.toml:2: gate\.metric: .*ndcg@10") as info:
        load_config(path)
    assert repr(metric) in str(info.value)


def test_every_quality_metric_of_the_report_is_accepted(tmp_path: Path) -> None:
    for metric in ("ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "map", "mrr", "err@10", "dcg@10"):
        assert load_config(_config(tmp_path, f'[gate]\nmetric = "{metric}"\n')).gate.metric


@pytest.mark.parametrize("name", ["", ".", "../escape", "a/b"])
def test_model_name_is_checked_at_load(tmp_path: Path, name: str) -> None:
    with pytest.raises(CommandError, match=r"n\.toml:2: model\.name: "):
        load_config(_config(tmp_path, f'[model]\nname = "{name}"\n'))


def test_errors_name_the_line_of_the_key(tmp_path: Path) -> None:
    text = '# nightly\n[data]\ndir = "x"\n\n[model]\nengine = "native"\n'
    text += 'lambdamart.num_trees = "many"\n'
    with pytest.raises(CommandError, match=r"n\.toml:7: model\.lambdamart\.num_trees: "):
        load_config(_config(tmp_path, text))
    # a check across keys points at the key it names first
    text = '[data]\nsource = "files"\ndir = "s3://bucket/ltr"\n'
    with pytest.raises(CommandError, match=r"n\.toml:3: data\.dir is a s3:// URL: "):
        load_config(_config(tmp_path, text))
    text = '[experiment]\nmode = "ab"\nenabled = true\n'
    with pytest.raises(CommandError, match=r"n\.toml:3: experiment\.enabled needs "):
        load_config(_config(tmp_path, text))
    # a value set on the command line has no line in the file
    with pytest.raises(CommandError, match=r"n\.toml: model\.engine: "):
        load_config(_config(tmp_path, '[model]\nengine = "native"\n'), {"model.engine": "x"})
    # ... and names the flag that set it: `--data s3://...` was blamed on the file
    text = '[data]\nsource = "files"\ndir = "local"\n'
    result = CliRunner().invoke(
        app, ["nightly", "--config", str(_config(tmp_path, text)), "--data", "s3://b/x"]
    )
    assert result.exit_code == 2
    assert "error: --data: data.dir is a s3:// URL: " in result.stderr
    # a flag not given leaves the file's line
    text = '[data]\nsource = "files"\ndir = "s3://bucket/ltr"\n'
    result = CliRunner().invoke(app, ["nightly", "--config", str(_config(tmp_path, text))])
    assert result.exit_code == 2 and "n.toml:3: data.dir is a s3:// URL: " in result.stderr


def _no_training(*args: object, **kwargs: object) -> object:
    raise AssertionError("trained before the check")


def test_a_registry_that_is_a_file_fails_before_training(
    partitioned: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nightly_run, "train_candidate", _no_training)
    path = write_config(tmp_path, partitioned)
    (tmp_path / "registry").write_text("not a directory")
    with pytest.raises(CommandError, match=r"publish\.registry: .*registry is a file"):
        run_nightly(load_config(path))
    result = CliRunner().invoke(app, ["nightly", "--config", str(path)])
    assert result.exit_code == 2
    assert f"{path}: publish.registry: {tmp_path / 'registry'} is a file" in result.stderr
    (tmp_path / "parent-file").write_text("")
    with pytest.raises(CommandError, match=r"publish\.registry: cannot create"):
        run_nightly(load_config(path, {"publish.registry": tmp_path / "parent-file" / "reg"}))


def test_a_bad_item_set_ttl_fails_before_training(
    partitioned: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It is read when the publish switches the item set in Redis: after training."""
    monkeypatch.setattr(nightly_run, "train_candidate", _no_training)
    monkeypatch.setenv("LTR_ITEM_SET_OLD_TTL_SECONDS", "a day")
    path = write_config(tmp_path, partitioned)
    overrides = {"publish.redis_url": "redis://127.0.0.1:1/0"}
    with pytest.raises(RetentionError, match="LTR_ITEM_SET_OLD_TTL_SECONDS='a day'"):
        run_nightly(load_config(path, overrides))
    run = CliRunner().invoke(
        app, ["nightly", "--config", str(path)], env={"LTR_REDIS_URL": "redis://127.0.0.1:1/0"}
    )
    assert run.exit_code == 2 and "LTR_ITEM_SET_OLD_TTL_SECONDS='a day'" in run.stderr


def test_missing_experiment_logs_warn_before_training(
    deployed: Path,
    partitioned: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(nightly_run, "train_candidate", _no_training)
    monkeypatch.setattr(nightly_run, "_train_on_cluster", _no_training)
    logs = tmp_path / "impressions.jsonl"
    overrides = {"experiment.enabled": True, "experiment.logs": str(logs)}
    config = load_config(write_config(tmp_path, partitioned), overrides)
    monkeypatch.setattr("trainer.experiments.nightly.decide_running", lambda config: None)
    with caplog.at_level(logging.WARNING), pytest.raises(AssertionError, match="trained"):
        run_nightly(config)
    assert f"nightly config: experiment.logs: {logs} does not exist" in caplog.text


def test_an_empty_log_file_is_named(tmp_path: Path) -> None:
    logs = tmp_path / "empty.jsonl"
    logs.write_text("")
    path = _config(
        tmp_path,
        f'work_dir = "{tmp_path / "work"}"\n[data]\nsource = "logs"\ndir = "{logs}"\n'
        f'[publish]\nregistry = "{tmp_path / "registry"}"\n',
    )
    with pytest.raises(CommandError, match=f"{logs}: the logs hold no impressions"):
        load_data(load_config(path))
