"""`ltr train`: the debiasing flags act only with --unbiased, and are refused without it."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.trainer.commands.conftest import TRAIN, one_error_line
from trainer.cli import app


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--debias", "ipw"], "--debias ipw"),
        (["--debias", "pairwise"], "--debias pairwise"),
        (["--debias", "position-bias"], "--debias position-bias"),
        (["--max-weight", "5"], "--max-weight 5"),
        (["--discount", "ctr"], "--discount ctr"),
        (["--engine", "dnn", "--debias", "ipw"], "--debias ipw"),
    ],
)
def test_debias_flags_without_unbiased_are_refused(
    runner: CliRunner, tmp_path: Path, flags: list[str], named: str
) -> None:
    args = ["train", "--train", str(TRAIN), "--out", str(tmp_path / "v"), "--num-trees", "1"]
    result = runner.invoke(app, [*args, "--threads", "1", *flags])
    assert result.exit_code == 2, result.output
    assert one_error_line(result.stderr) == f"error: {named} is used with --unbiased"
    assert not (tmp_path / "v").exists()


def test_their_defaults_given_without_unbiased_train_as_before(
    runner: CliRunner, tmp_path: Path
) -> None:
    args = ["train", "--train", str(TRAIN), "--out", str(tmp_path / "v"), "--num-trees", "1"]
    result = runner.invoke(
        app, [*args, "--threads", "1", "--debias", "click-model", "--discount", "log2"]
    )
    assert result.exit_code == 0, result.output
