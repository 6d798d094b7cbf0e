"""Every expected failure of a command is one `error: ...` line and exit code 2."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
import typer
from typer.testing import CliRunner

from tests.trainer.commands.conftest import TRAIN, one_error_line
from trainer.cli import app, main
from trainer.commands.errors import clear_errors


@pytest.mark.parametrize(
    ("raised", "line"),
    [
        (NotADirectoryError(20, "Not a directory", "/srv/reg/m"), "/srv/reg/m: not a directory"),
        (PermissionError(13, "Permission denied", "/srv/reg"), "/srv/reg: permission denied"),
        (OSError(28, "No space left on device"), "[Errno 28] No space left on device"),
    ],
)
def test_what_the_system_refuses_is_one_line_naming_the_path(
    raised: OSError, line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(typer.Exit) as info, clear_errors():
        raise raised
    assert info.value.exit_code == 2
    assert capsys.readouterr().err == f"error: {line}\n"


def _publish_into_a_file(runner: CliRunner, tmp_path: Path) -> tuple[list[str], Path]:
    """The arguments of a publish whose registry path is a file, and that registry path."""
    version = tmp_path / "v1"
    args = ["train", "--train", str(TRAIN), "--out", str(version), "--num-trees", "2"]
    assert runner.invoke(app, [*args, "--threads", "1"]).exit_code == 0
    registry = tmp_path / "registry"
    registry.write_text("not a directory")
    return ["publish", "--model", str(version), "--registry", str(registry)], registry


def test_publishing_into_a_registry_that_is_a_file(runner: CliRunner, tmp_path: Path) -> None:
    """It was a traceback ending in NotADirectoryError."""
    publish, registry = _publish_into_a_file(runner, tmp_path)
    result = runner.invoke(app, publish)
    assert result.exit_code == 2
    assert result.stderr == f"error: {registry / 'default'}: not a directory\n"
    assert result.stdout == ""


def test_with_json_a_refusal_is_an_object_on_stdout_too(runner: CliRunner, tmp_path: Path) -> None:
    """A script reading `ltr publish --json` got nothing on stdout when the command refused."""
    publish, registry = _publish_into_a_file(runner, tmp_path)
    result = runner.invoke(app, [*publish, "--json"])
    assert result.exit_code == 2
    message = f"{registry / 'default'}: not a directory"
    assert result.stderr == f"error: {message}\n"
    assert orjson.loads(result.stdout) == {"status": "error", "error": message, "exit_code": 2}

    missing = tmp_path / "missing.txt"
    evaluate = ["evaluate", "--model", str(tmp_path / "v1"), "--data", str(missing), "--json"]
    result = runner.invoke(app, evaluate)
    assert result.exit_code == 2
    assert orjson.loads(result.stdout)["error"] == one_error_line(result.stderr)[len("error: ") :]


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["publish", "--json", "--bogus"], "No such option: --bogus"),
        (["publish", "--keep", "abc", "--json"], "Invalid value for '--keep'"),
        (["features", "inspect", "--json"], "Missing argument"),
    ],
)
def test_with_json_a_command_line_that_does_not_parse_is_an_object_on_stdout_too(
    capsys: pytest.CaptureFixture[str], args: list[str], error: str
) -> None:
    """Before: the usage box on stderr and nothing on stdout for a script to parse."""
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 2
    out, err = capsys.readouterr()
    failure = orjson.loads(out)
    assert failure["status"] == "error" and failure["exit_code"] == 2, failure
    assert failure["error"].startswith(error), failure
    assert "Usage: " in err  # the usage box as without --json


def test_without_json_a_command_line_that_does_not_parse_prints_nothing_on_stdout(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["publish", "--bogus"])
    assert exited.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and "No such option: --bogus" in err


def test_with_json_exit_codes_and_help_are_as_without(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["publish", "--json", "--help"])
    assert exited.value.code == 0
    assert "Usage: " in capsys.readouterr().out
