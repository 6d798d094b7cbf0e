"""The loop's training half: `ltr dataset --from-logs` then `ltr train --unbiased`."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from app.artifacts.store import load_version
from tests.trainer.clicks.conftest import write_pbm_log
from tests.trainer.commands.conftest import one_error_line
from trainer.cli import app


@pytest.fixture(scope="module")
def click_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """train/valid Parquet + propensities.json joined from PBM click logs."""
    root = tmp_path_factory.mktemp("clicks")
    write_pbm_log(root / "log.jsonl", 600, docs=8, seed=11)
    result = CliRunner().invoke(
        app, ["dataset", "--from-logs", str(root / "log.jsonl"), "--out", str(root / "data")]
    )
    assert result.exit_code == 0, result.output
    return root / "data"


def _train(runner: CliRunner, data: Path, out: Path, *extra: str) -> object:
    args = ["train", "--train", str(data / "train.parquet"), "--valid", str(data / "valid.parquet")]
    args += ["--out", str(out), "--num-trees", "5", "--num-leaves", "4", "--json", *extra]
    return runner.invoke(app, args)


def test_unbiased_training_is_recorded(runner: CliRunner, click_data: Path, tmp_path: Path) -> None:
    props = str(click_data / "propensities.json")
    result = _train(runner, click_data, tmp_path / "v1", "--unbiased", "--propensities", props)
    assert result.exit_code == 0, result.output
    summary = orjson.loads(result.stdout)
    training = load_version(Path(summary["model_dir"])).manifest.training
    assert training["objective"]["lambdas"] == "click_likelihood"  # the default --debias
    assert training["objective"]["propensities"] == props
    assert training["objective"]["discount"] == "log2"
    extra = ["--unbiased", "--propensities", props, "--debias", "ipw", "--discount", "ctr"]
    fitted = _train(runner, click_data, tmp_path / "v2", *extra)
    assert fitted.exit_code == 0, fitted.output
    objective = load_version(tmp_path / "v2").manifest.training["objective"]
    assert objective["lambdas"] == "ipw" and objective["discount"] == "ctr"
    plain = _train(runner, click_data, tmp_path / "v3")
    assert plain.exit_code == 0, plain.output
    assert "objective" not in load_version(tmp_path / "v3").manifest.training


def test_validation_clicks_are_scored_with_ipw_labels(
    runner: CliRunner, click_data: Path, tmp_path: Path
) -> None:
    props = str(click_data / "propensities.json")
    for debias in ("ipw", "click-model", "position-bias"):
        extra = ["--unbiased", "--propensities", props, "--debias", debias, "--early-stopping", "3"]
        result = _train(runner, click_data, tmp_path / debias, *extra)
        assert result.exit_code == 0, result.output
        summary = orjson.loads(result.stdout)
        training = load_version(Path(summary["model_dir"])).manifest.training
        assert training["valid_source"].endswith("(IPW labels)")
        assert training["valid_metric"] == "dcg@10"
        # Gains of clicks shown low are 1/theta > 1: DCG beyond what 0/1 clicks could reach.
        assert summary["metrics"]["dcg@10"] > 0.0
    plain = orjson.loads(_train(runner, click_data, tmp_path / "plain").stdout)
    training = load_version(Path(plain["model_dir"])).manifest.training
    assert training["valid_metric"] == "ndcg@10"
    assert not training["valid_source"].endswith("(IPW labels)")


def test_early_stopping_on_raw_clicks_is_refused_and_on_few_clicks_warned(
    runner: CliRunner, click_data: Path, tmp_path: Path
) -> None:
    """A held-out trial: `--debias position-bias` ("no file needed") with --early-stopping
    scored the validation clicks as served and kept 1-3 trees on every dataset."""
    stop = ("--unbiased", "--debias", "position-bias", "--early-stopping", "3")
    result = _train(runner, click_data, tmp_path / "raw", *stop)
    assert result.exit_code == 2
    assert "--early-stopping on click data needs --propensities FILE" in one_error_line(
        result.stderr
    )
    assert not (tmp_path / "raw").exists()
    assert _train(runner, click_data, tmp_path / "fixed", *stop[:3]).exit_code == 0  # no stop
    props = str(click_data / "propensities.json")
    result = _train(runner, click_data, tmp_path / "few", *stop, "--propensities", props)
    assert result.exit_code == 0, result.output
    assert "warning: the validation data holds" in result.stderr
    assert "clicks: early stopping on so few is noisy" in result.stderr
    # The training figure is the NDCG of the clicks as served, and says so.
    assert "train raw-click ndcg@10" in result.stderr


def test_unbiased_needs_a_native_engine_and_a_file(
    runner: CliRunner, click_data: Path, tmp_path: Path
) -> None:
    props = str(click_data / "propensities.json")
    result = _train(runner, click_data, tmp_path / "a", "--unbiased")
    assert result.exit_code == 2
    assert "--unbiased needs --propensities" in one_error_line(result.stderr)
    result = _train(runner, click_data, tmp_path / "a", "--propensities", props)
    assert result.exit_code == 2
    assert "--propensities is used with --unbiased" in one_error_line(result.stderr)
    result = _train(
        runner,
        click_data,
        tmp_path / "a",
        "--unbiased",
        "--propensities",
        props,
        "--max-weight",
        "0.5",
    )
    assert result.exit_code == 2  # the default --debias has no weights to clip
    assert "--max-weight clips IPW weights" in one_error_line(result.stderr)
    result = _train(
        runner,
        click_data,
        tmp_path / "a",
        *("--unbiased", "--propensities", props, "--debias", "ipw", "--max-weight", "0.5"),
    )
    assert result.exit_code == 2
    assert "--max-weight 0.5: must be at least 1" in one_error_line(result.stderr)
    result = _train(
        runner,
        click_data,
        tmp_path / "b",
        "--unbiased",
        "--propensities",
        props,
        "--engine",
        "lightgbm",
    )
    assert result.exit_code == 2
    assert "--unbiased works with --engine native" in one_error_line(result.stderr)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"theta": [1.0, -1.0]}))
    result = _train(runner, click_data, tmp_path / "c", "--unbiased", "--propensities", str(bad))
    assert result.exit_code == 2
    assert "bad.json: theta[1] = -1.0" in one_error_line(result.stderr)
    result = _train(
        runner, click_data, tmp_path / "d", "--unbiased", "--propensities", props, "--discount", "x"
    )
    assert result.exit_code == 2
    assert "--discount" in one_error_line(result.stderr)


def test_evaluate_on_clicks_with_ipw_labels(
    runner: CliRunner, click_data: Path, tmp_path: Path
) -> None:
    trained = orjson.loads(_train(runner, click_data, tmp_path / "m").stdout)
    args = [
        "evaluate",
        "--model",
        trained["model_dir"],
        "--data",
        str(click_data / "valid.parquet"),
    ]
    raw = orjson.loads(runner.invoke(app, [*args, "--json"]).stdout)
    props = str(click_data / "propensities.json")
    result = runner.invoke(app, [*args, "--json", "--propensities", props])
    assert result.exit_code == 0, result.output
    ipw = orjson.loads(result.stdout)
    assert (raw["labels"], ipw["labels"]) == ("as given", "clicks, IPW")
    # A click below position 1 gains 1/theta > 1: IPW DCG is above the raw one.
    assert ipw["dcg@10"] > raw["dcg@10"] > 0.0
    missing = runner.invoke(app, [*args, "--propensities", str(tmp_path / "none.json")])
    assert missing.exit_code == 2
    assert "none.json: no such file" in one_error_line(missing.stderr)


def test_evaluate_refuses_ipw_on_grades_whose_clicks_are_kept_apart(
    runner: CliRunner, click_data: Path, tmp_path: Path
) -> None:
    """`ltr simulate` writes true grades as labels and the clicks beside them: --propensities
    re-weighted the grades and reported "clicks, IPW" (a held-out trial)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    trained = orjson.loads(_train(runner, click_data, tmp_path / "m").stdout)
    table = pq.read_table(click_data / "valid.parquet")
    graded = tmp_path / "graded.parquet"
    pq.write_table(table.append_column("click", pa.array([0] * table.num_rows)), graded)
    args = ["evaluate", "--model", trained["model_dir"], "--data", str(graded)]
    props = str(click_data / "propensities.json")
    result = runner.invoke(app, [*args, "--propensities", props])
    assert result.exit_code == 2
    assert one_error_line(result.stderr).startswith(
        f"error: {graded}: its labels are relevance grades, its clicks are in its `click` column"
    )
    assert runner.invoke(app, args).exit_code == 0  # on the grades, as given
