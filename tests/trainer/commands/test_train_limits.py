"""`ltr train` bounding sizes that would crash or hang (a held-out trial: --num-leaves 10^8
died on a 5.59 TiB numpy allocation, a traceback and nothing on stdout under --json), a
MemoryError anywhere in training as one clear error, and --early-stopping without --valid."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner, Result

from trainer.cli import app

from .conftest import TRAIN, one_error_line

FAST = ["--num-trees", "3", "--num-leaves", "3", "--threads", "1"]


def _train(runner: CliRunner, out: Path, *extra: str) -> Result:
    return runner.invoke(app, ["train", "--train", str(TRAIN), "--out", str(out), *extra])


def _json_refusal(result: Result) -> str:
    """The message of a --json refusal: exit 2, one error line on stderr, the same message as
    the one JSON object on stdout."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    line = one_error_line(result.stderr)
    failure = orjson.loads(result.stdout)
    assert failure == {"status": "error", "error": line[len("error: ") :], "exit_code": 2}
    return str(failure["error"])


@pytest.mark.parametrize("engine", ["native", "lightgbm", "lightgbm-dask"])
def test_num_leaves_beyond_lightgbms_limit_is_refused_for_every_tree_engine(
    runner: CliRunner, tmp_path: Path, engine: str
) -> None:
    out = tmp_path / "v"
    args = ["--engine", engine, "--num-trees", "3", "--num-leaves", "100000000", "--json"]
    message = _json_refusal(_train(runner, out, *args))
    assert message.startswith("--num-leaves: ") and "131072" in message, message
    assert not out.exists()


def test_the_largest_num_leaves_lightgbm_takes_trains(runner: CliRunner, tmp_path: Path) -> None:
    """131072 leaves on a few hundred documents: the native learner's histograms are sized by
    the leaves a tree can reach, not by the parameter."""
    args = ["--num-trees", "2", "--num-leaves", "131072", "--threads", "1", "--json"]
    result = _train(runner, tmp_path / "v", *args)
    assert result.exit_code == 0, result.output
    assert orjson.loads(result.stdout)["trees"] == 2


@pytest.mark.parametrize(
    ("flag", "value", "limit"),
    [("--num-trees", "1000000000000", "1000000"), ("--threads", "100000", "4096")],
)
def test_sizes_that_would_hang_or_crash_are_refused(
    runner: CliRunner, tmp_path: Path, flag: str, value: str, limit: str
) -> None:
    """--num-trees 10^12 was accepted (training for ever); LightGBM crashed (segmentation
    fault) on --threads 100000."""
    message = _json_refusal(
        _train(runner, tmp_path / "v", "--engine", "lightgbm", flag, value, "--json")
    )
    assert message.startswith(f"{flag}: ") and limit in message, message


OUT_OF_RANGE = [
    ("--seed", "-1", "greater than or equal to 0"),
    ("--seed", "1180591620717411303424", "2147483647"),
    ("--learning-rate", "1e308", "1000"),  # the trees' shrinkage; Adam's step is not bounded
]


@pytest.mark.parametrize(
    ("engine", "flag", "value", "bound"),
    [
        (engine, *case)
        for engine in ("native", "lightgbm", "dnn")
        for case in OUT_OF_RANGE
        if engine != "dnn" or case[0] == "--seed"
    ],
)
def test_seeds_and_rates_out_of_range_are_refused_naming_the_flag(
    runner: CliRunner, tmp_path: Path, engine: str, flag: str, value: str, bound: str
) -> None:
    """A trial: --seed -1 crashed numpy's generator (a traceback; LightGBM took it), a seed past
    64 bits crashed orjson, and --learning-rate 1e308 overflowed the leaves and blamed the
    model file."""
    if engine == "dnn":
        pytest.importorskip("torch", reason="the dnn extra (torch) is not installed")
    out = tmp_path / "v"
    message = _json_refusal(_train(runner, out, "--engine", engine, flag, value, "--json"))
    assert message.startswith(f"{flag}: ") and bound in message, message
    assert not out.exists()


@pytest.mark.parametrize(
    ("flag", "value", "limit"),
    [("--threads", "100000", "4096"), ("--epochs", "1000000000000", "1000000")],
)
def test_dnn_sizes_that_would_crash_or_hang_are_refused(
    runner: CliRunner, tmp_path: Path, flag: str, value: str, limit: str
) -> None:
    """torch died of a segmentation fault on --threads 100000 (a held-out trial); 10^12 epochs
    without early stopping never end."""
    pytest.importorskip("torch", reason="the dnn extra (torch) is not installed")
    out = tmp_path / "v"
    message = _json_refusal(_train(runner, out, "--engine", "dnn", flag, value, "--json"))
    assert message.startswith(f"{flag}: ") and limit in message, message
    assert not out.exists()


def test_bounds_apply_to_a_params_file_too(runner: CliRunner, tmp_path: Path) -> None:
    config = tmp_path / "params.toml"
    config.write_text("num_leaves = 100000000\n")
    result = _train(runner, tmp_path / "v", "--config", str(config))
    assert result.exit_code == 2
    line = one_error_line(result.stderr)
    assert line.startswith(f"error: {config}:1: num_leaves: ") and "131072" in line, line


def test_out_of_memory_in_training_is_one_clear_error(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A MemoryError (numpy's _ArrayMemoryError is one) anywhere in training: an `error:`
    line and a JSON error object, not a traceback with exit code 1."""
    from trainer.lambdamart import tree_learner

    def no_memory(*_: object, **__: object) -> None:
        raise MemoryError("Unable to allocate 5.59 TiB for an array")

    monkeypatch.setattr(tree_learner.TreeLearner, "__init__", no_memory)
    out = tmp_path / "v"
    message = _json_refusal(_train(runner, out, *FAST, "--json"))
    assert message.startswith("out of memory while training"), message
    assert "5.59 TiB" in message and "--num-leaves" in message
    assert not out.exists()


@pytest.mark.parametrize("engine", ["native", "lightgbm", "lightgbm-dask", "dnn"])
def test_early_stopping_without_valid_is_refused(
    runner: CliRunner, tmp_path: Path, engine: str
) -> None:
    """It was silently ignored: every tree kept, nothing said."""
    out = tmp_path / "v"
    message = _json_refusal(
        _train(runner, out, "--engine", engine, "--early-stopping", "5", "--json")
    )
    assert message.startswith("--early-stopping needs --valid FILE"), message
    assert not out.exists()


def test_early_stopping_from_a_params_file_without_valid_is_warned(
    runner: CliRunner, tmp_path: Path
) -> None:
    """A params file may serve runs with and without validation data: a warning, not an
    error."""
    config = tmp_path / "params.toml"
    config.write_text("early_stopping_rounds = 5\n")
    result = _train(runner, tmp_path / "v", *FAST, "--config", str(config), "--json")
    assert result.exit_code == 0, result.output
    assert f"warning: {config}: early_stopping_rounds is ignored without --valid" in result.stderr
    assert orjson.loads(result.stdout)["trees"] == 3


def test_early_stopping_with_valid_is_still_accepted(runner: CliRunner, tmp_path: Path) -> None:
    result = _train(runner, tmp_path / "v", *FAST, "--valid", str(TRAIN), "--early-stopping", "2")
    assert result.exit_code == 0, result.output
