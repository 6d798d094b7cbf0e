"""`ltr nightly --loop`: a run that fails as expected (no data yet, refused, bad data) is one
line and the loop goes on; a compose trial saw "nightly run crashed" with a traceback every
night while the data volume was empty."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import trainer.commands.nightly as nightly_command
from tests.trainer.nightly.conftest import write_config
from trainer.cli import app


def test_no_data_yet_is_one_line_and_the_loop_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "data"
    empty.mkdir()
    config = write_config(tmp_path, empty)
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 3:
            raise SystemExit(7)  # ends the loop: not an Exception, which the loop catches

    monkeypatch.setattr(nightly_command.time, "sleep", sleep)
    result = CliRunner().invoke(app, ["nightly", "--config", str(config), "--loop"])
    assert result.exit_code == 7, result.output
    failures = [line for line in result.stderr.splitlines() if "refused or failed" in line]
    assert len(failures) == 2, result.stderr  # two runs, each one line, the loop went on
    assert "training data directory no dated partitions" in failures[0]
    assert "Traceback" not in result.output and "crashed" not in result.output
