"""`ltr nightly` says what happened: a version installed only as an experiment's candidate
was not published (CURRENT did not move)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import trainer.nightly.run as nightly_run
from trainer.cli import app
from trainer.nightly.gate import GateResult
from trainer.nightly.run import NightlyOutcome
from trainer.publish import PublishResult


def test_a_candidate_is_not_reported_as_published(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    installed = PublishResult("m", "v2", "v1", tmp_path / "v2", [], False)
    started = {"name": "m-v2", "candidate": "v2", "control": "v1"}
    outcome = NightlyOutcome(
        installed, GateResult(True, []), tmp_path / "v2", {"decided": None, "started": started}
    )
    monkeypatch.setattr(nightly_run, "run_nightly", lambda config: outcome)
    result = CliRunner().invoke(app, ["nightly", "--registry", str(tmp_path / "registry")])
    assert result.exit_code == 0, result.output
    assert "published" not in result.stdout
    assert "installed m v2 as the candidate of experiment m-v2; CURRENT stays v1" in result.stdout
