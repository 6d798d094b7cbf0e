"""`ltr train` refusing what cannot work before it trains, and saying when a model learned
nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from app.artifacts.store import load_version
from trainer.cli import app

from .conftest import TRAIN, one_error_line

FAST = ["--num-trees", "3", "--num-leaves", "3", "--threads", "1"]
DNN = ["--engine", "dnn", "--epochs", "1", "--hidden", "4", "--threads", "1"]


def _train(runner: CliRunner, train: Path, out: Path, *extra: str) -> Result:
    return runner.invoke(app, ["train", "--train", str(train), "--out", str(out), *extra])


def _letor(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


@pytest.mark.parametrize("where", ["proc", "file"])
def test_an_out_that_cannot_be_created_is_refused_before_training(
    runner: CliRunner, tmp_path: Path, where: str
) -> None:
    # Root ignores permission bits: a parent under /proc, or one that is a regular file,
    # cannot hold a directory for anyone.
    if where == "proc":
        out = Path("/proc/v1")
    else:
        (tmp_path / "plain").write_text("not a directory")
        out = tmp_path / "plain" / "models" / "v1"
    result = _train(runner, TRAIN, out, *FAST)
    assert result.exit_code == 2
    line = one_error_line(result.stderr)  # one line: no progress, so no training either
    assert line.startswith(f"error: --out {out}: cannot be created"), line
    assert "No such file or directory" in line or "is not a directory" in line


def test_an_out_with_missing_parents_is_still_accepted(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "a" / "b" / "v1"
    result = _train(runner, TRAIN, out, *FAST)
    assert result.exit_code == 0, result.stderr
    assert load_version(out).manifest.version == "v1"
    assert [p.name for p in (tmp_path / "a" / "b").iterdir()] == ["v1"]  # no probe left


@pytest.mark.parametrize("hidden", ["-3", "0", "16,0", ""])
def test_hidden_widths_must_be_positive(runner: CliRunner, tmp_path: Path, hidden: str) -> None:
    result = _train(runner, TRAIN, tmp_path / "v", "--engine", "dnn", "--hidden", hidden)
    assert result.exit_code == 2
    line = one_error_line(result.stderr)
    assert line.startswith("error: --hidden: ") and repr(hidden) in line, line


def test_hidden_with_an_empty_part_is_refused(runner: CliRunner, tmp_path: Path) -> None:
    result = _train(runner, TRAIN, tmp_path / "v", "--engine", "dnn", "--hidden", "16,,8")
    assert result.exit_code == 2
    assert "error: --hidden: a width is empty in '16,,8'" in one_error_line(result.stderr)


def test_hidden_zero_in_a_config_file_is_refused(runner: CliRunner, tmp_path: Path) -> None:
    config = tmp_path / "params.toml"
    config.write_text('engine = "dnn"\nhidden = [8, 0]\n')
    result = _train(runner, TRAIN, tmp_path / "v", "--config", str(config))
    assert result.exit_code == 2
    assert f"error: {config}:2: hidden: " in one_error_line(result.stderr)


@pytest.mark.parametrize(
    "extra, flag",
    [
        (["--learning-rate", "inf"], "--learning-rate"),
        (["--learning-rate", "nan"], "--learning-rate"),
        (["--engine", "lightgbm", "--learning-rate", "inf"], "--learning-rate"),
        (["--engine", "dnn", "--learning-rate", "inf"], "--learning-rate"),
        (["--engine", "dnn", "--dropout", "nan"], "--dropout"),
    ],
)
def test_non_finite_float_options_are_refused(
    runner: CliRunner, tmp_path: Path, extra: list[str], flag: str
) -> None:
    result = _train(runner, TRAIN, tmp_path / "v", *extra)
    assert result.exit_code == 2
    assert one_error_line(result.stderr) == f"error: {flag}: Input should be a finite number"
    assert not (tmp_path / "v").exists()


def test_non_finite_float_in_a_config_file_is_refused(runner: CliRunner, tmp_path: Path) -> None:
    config = tmp_path / "params.toml"
    config.write_text("sigma = inf\n")
    result = _train(runner, TRAIN, tmp_path / "v", "--config", str(config))
    assert result.exit_code == 2
    line = one_error_line(result.stderr)
    assert line == f"error: {config}:1: sigma: Input should be a finite number"


def test_infinite_max_weight_is_refused(runner: CliRunner, tmp_path: Path) -> None:
    result = _train(
        runner, TRAIN, tmp_path / "v", "--unbiased", "--debias", "ipw", "--max-weight", "inf"
    )
    assert result.exit_code == 2
    assert "error: --max-weight inf: must be a finite number" in one_error_line(result.stderr)


@pytest.mark.parametrize("engine", ["native", "dnn"])
def test_early_stopping_error_names_the_real_flag(
    runner: CliRunner, tmp_path: Path, engine: str
) -> None:
    result = _train(runner, TRAIN, tmp_path / "v", "--engine", engine, "--early-stopping", "0")
    assert result.exit_code == 2
    line = one_error_line(result.stderr)
    assert line.startswith("error: --early-stopping: ") and "rounds" not in line, line


def test_dnn_refuses_infinite_features_before_training(runner: CliRunner, tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the dnn extra (torch) is not installed")
    data = _letor(
        tmp_path / "inf.txt",
        [
            "1 qid:1 1:0.1 2:0.5",
            "0 qid:1 1:0.2 2:inf",
            "2 qid:2 1:0.3 2:0.1",
            "0 qid:2 1:0.5 2:0.7",
        ],
    )
    result = _train(runner, data, tmp_path / "v", *DNN)
    assert result.exit_code == 2
    line = one_error_line(result.stderr)  # no epoch line: refused before training
    assert line.startswith(f"error: {data}:2: feature 'f2' is inf (query 1)"), line
    assert not (tmp_path / "v").exists()


def test_dnn_without_valid_records_metrics_on_the_training_data(
    runner: CliRunner, tmp_path: Path
) -> None:
    pytest.importorskip("torch", reason="the dnn extra (torch) is not installed")
    out = tmp_path / "v"
    result = _train(runner, TRAIN, out, *DNN, "--json")
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["evaluated_on"] == "train" and "ndcg@10" in summary["metrics"]
    entry = load_version(out).manifest.metrics["ndcg@10"]
    assert entry["dataset"] == str(TRAIN)


@pytest.mark.parametrize(
    "lines, extra, reason",
    [
        (["0 qid:1 1:0.1", "0 qid:1 1:0.2", "0 qid:2 1:0.3"], [], "every label is 0"),
        (["1 qid:1 1:0.1", "0 qid:2 1:0.2", "2 qid:3 1:0.3"], [], "a single document"),
        (
            ["1 qid:1 1:0.1", "0 qid:1 1:0.2", "2 qid:2 1:0.3", "0 qid:2 1:0.4"],
            ["--min-data-in-leaf", "3"],
            "--min-data-in-leaf 3 leaves no split of the 4 training documents",
        ),
        (
            ["1 qid:1 1:0.1", "1 qid:1 1:0.2", "2 qid:2 1:0.3", "2 qid:2 1:0.4"],
            ["--min-data-in-leaf", "1"],
            "no query has documents with different labels",
        ),
    ],
)
def test_a_model_that_learned_nothing_is_written_with_a_warning(
    runner: CliRunner, tmp_path: Path, lines: list[str], extra: list[str], reason: str
) -> None:
    data = _letor(tmp_path / "data.txt", lines)
    result = _train(runner, data, tmp_path / "v", *FAST, *extra)
    assert result.exit_code == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "learned nothing (no split" in warnings[0], result.stderr
    assert reason in warnings[0]


@pytest.mark.parametrize(
    "lines, reason",
    [
        (["0 qid:1 1:0.1", "0 qid:1 1:0.2", "0 qid:2 1:0.3", "0 qid:2 1:0.4"], "every label is 0"),
        (["1 qid:1 1:0.1", "0 qid:2 1:0.2", "2 qid:3 1:0.3"], "a single document"),
    ],
)
def test_lightgbm_learning_nothing_is_warned_of_too(
    runner: CliRunner, tmp_path: Path, lines: list[str], reason: str
) -> None:
    """LightGBM writes one tree of a single leaf where the native learner writes none: the
    warning counted trees, so it never fired for --engine lightgbm."""
    pytest.importorskip("lightgbm", reason="the train extra (lightgbm) is not installed")
    data = _letor(tmp_path / "data.txt", lines)
    result = _train(runner, data, tmp_path / "v", *FAST, "--engine", "lightgbm", "--json")
    assert result.exit_code == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "learned nothing (no split" in warnings[0], result.stderr
    assert reason in warnings[0]


def test_a_model_that_learned_something_has_no_warning(runner: CliRunner, tmp_path: Path) -> None:
    result = _train(runner, TRAIN, tmp_path / "v", *FAST)
    assert result.exit_code == 0, result.stderr
    assert "warning:" not in result.stderr


def test_training_data_without_any_feature_is_refused(runner: CliRunner, tmp_path: Path) -> None:
    data = _letor(tmp_path / "bare.txt", ["1 qid:1", "0 qid:1", "2 qid:2", "0 qid:2"])
    result = _train(runner, data, tmp_path / "v", "--num-trees", "2")
    assert result.exit_code == 2
    assert one_error_line(result.stderr) == f"error: {data}: no features: no line or column " + (
        "gives a feature value"
    )
    assert not (tmp_path / "v").exists()


def test_a_validation_file_naming_a_larger_feature_id_widens_both(
    runner: CliRunner, tmp_path: Path
) -> None:
    """A trial: a feature always 0 in training never appears in sparse LETOR lines, and a
    validation file naming it was refused ("feature id 3 exceeds num_features=2")."""
    train = tmp_path / "tr.txt"
    train.write_text("1 qid:1 1:0.5 2:0.1\n0 qid:1 1:0.2 2:0.3\n1 qid:2 1:0.9\n0 qid:2 1:0.1\n")
    valid = tmp_path / "va.txt"
    valid.write_text("1 qid:1 1:0.5 3:0.1\n0 qid:1 1:0.2 2:0.3\n")
    out = tmp_path / "m" / "v1"
    args = ["train", "--train", str(train), "--valid", str(valid), "--out", str(out)]
    result = runner.invoke(app, [*args, "--num-trees", "2", "--min-data-in-leaf", "1"])
    assert result.exit_code == 0, result.stderr
    assert load_version(out).manifest.feature_names == ["f1", "f2", "f3"]


@pytest.mark.parametrize("engine", ["native", "lightgbm"])
def test_features_missing_in_every_row_are_warned_of_by_tree_engines(
    runner: CliRunner, tmp_path: Path, engine: str
) -> None:
    """The network trainer said so; the tree engines kept such a feature silently (clients
    were asked to send it, and no tree ever read it). A column pyarrow types `null` (every
    value None) is such a feature too: it was refused as 'has type null, expected a number'."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    # make test installs the train extra: --engine lightgbm runs here, never skipped.
    rng = np.random.default_rng(0)
    n = 60
    columns = {
        "qid": np.repeat(np.arange(6), 10),
        "label": rng.integers(0, 3, n),
        "good": rng.random(n),
        "all_nan": np.full(n, np.nan),
        "all_null": pa.nulls(n),
    }
    data = tmp_path / "train.parquet"
    pq.write_table(pa.table(columns), data)
    assert pq.read_schema(data).field("all_null").type == pa.null()
    result = _train(
        runner, data, tmp_path / "v", *FAST, "--engine", engine, "--min-data-in-leaf", "1"
    )
    assert result.exit_code == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [
        "warning: features 'all_nan', 'all_null' are missing (NaN) in every training row: no "
        "tree can split on them, so the model ignores whatever value a request sends; fill the "
        "data in or leave the features out"
    ]
    manifest = json.loads((tmp_path / "v" / "manifest.json").read_text())
    assert manifest["feature_names"] == ["good", "all_nan", "all_null"]


@pytest.mark.parametrize("ids", ["numbers", "text"])
def test_columns_set_apart_from_the_features_are_named(
    runner: CliRunner, tmp_path: Path, ids: str
) -> None:
    """A numeric doc_id was learned as a feature without --items (a text one was refused),
    and `position`, `click` and `user_id` left the features without a word (a held-out
    trial): the id column is read as ids, and the note names them all."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    n = 60
    doc_ids = np.arange(n) if ids == "numbers" else np.array([f"d{i}" for i in range(n)])
    columns = {
        "qid": np.repeat(np.arange(6), 10),
        "label": rng.integers(0, 3, n),
        "f1": rng.random(n),
        "doc_id": doc_ids,
        "position": np.tile(np.arange(1, 11), 6),
        "click": rng.integers(0, 2, n),
    }
    data = tmp_path / "train.parquet"
    pq.write_table(pa.table(columns), data)
    result = _train(runner, data, tmp_path / "v", *FAST, "--min-data-in-leaf", "1")
    assert result.exit_code == 0, result.stderr
    notes = [line for line in result.stderr.splitlines() if line.startswith("note:")]
    assert notes == [
        f"note: {data}: not features: 'doc_id' (the document id), 'position' (where each row "
        "was shown, for position-bias correction), 'click' (logged clicks); rename one to "
        "train on it"
    ]
    manifest = json.loads((tmp_path / "v" / "manifest.json").read_text())
    assert manifest["feature_names"] == ["f1"]
