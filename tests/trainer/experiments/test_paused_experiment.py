"""An experiment whose control is no longer CURRENT (published or rolled back by hand) is
paused: status says so and why, and neither `decide` nor the nightly job acts on it."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.artifacts.store import read_current, set_current
from app.registry.experiments import ExperimentError, find_record, read_active
from tests.support import publish, random_ensemble
from tests.trainer.experiments.conftest import NF, read_json, write_logs
from tests.trainer.experiments.test_experiment_cli import ltr, start
from tests.trainer.experiments.test_nightly_hook import config
from trainer.experiments.lifecycle import end_experiment, pause_reason
from trainer.experiments.nightly import decide_running


@pytest.fixture
def paused(registry: Path, tmp_path: Path) -> Path:
    """Experiment m-v2 (v2 vs control v1) with winning logs, then v3 deployed by hand."""
    assert start(registry)[0] == 0
    spec = read_active(registry, "m")
    assert spec is not None
    write_logs(tmp_path / "imp.jsonl", spec, 1500, candidate_share=0.65)
    publish(registry, random_ensemble(NF, seed=3), version="v3")
    return tmp_path / "imp.jsonl"


def test_status_reports_the_pause_and_why(registry: Path, paused: Path) -> None:
    code, out, err = ltr("status", "--registry", str(registry))
    assert code == 0, err
    assert "m-v2" in out and "paused" in out and "running" not in out
    assert "CURRENT is v3" in out and "control is v1" in out
    code, out, _ = ltr("status", "--registry", str(registry), "--json")
    (exp,) = read_json(out)["experiments"]
    assert exp["status"] == "paused" and "CURRENT is v3" in exp["paused"]
    set_current(registry, "m", "v1")  # the control is back: the experiment resumes
    code, out, _ = ltr("status", "--registry", str(registry), "--json")
    (exp,) = read_json(out)["experiments"]
    assert exp["status"] == "running" and exp["paused"] is None


@pytest.mark.parametrize("dry_run", [False, True])
def test_decide_refuses_a_paused_experiment(registry: Path, paused: Path, dry_run: bool) -> None:
    args = ["--registry", str(registry), "--name", "m", "--logs", str(paused)]
    code, out, err = ltr("decide", *args, *(["--dry-run"] if dry_run else []))
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith("error: experiment m-v2 is paused: CURRENT is v3"), line
    assert read_current(registry, "m") == "v3" and read_active(registry, "m") is not None
    assert find_record(registry, "m-v2").status == "running"


def test_a_paused_experiment_cannot_end_with_a_verdict_but_can_stop(
    registry: Path, paused: Path
) -> None:
    spec = read_active(registry, "m")
    assert spec is not None and pause_reason(registry, spec) is not None
    for status in ("promoted", "rolled_back"):
        with pytest.raises(ExperimentError, match="is paused"):
            end_experiment(registry, spec, status, "won")  # type: ignore[arg-type]
    assert read_current(registry, "m") == "v3"
    assert end_experiment(registry, spec, "stopped", "by hand").status == "stopped"
    assert read_current(registry, "m") == "v3" and read_active(registry, "m") is None


def test_nightly_reports_the_pause_and_leaves_current(registry: Path, paused: Path) -> None:
    decided = decide_running(config(registry, paused))
    assert decided is not None and decided["action"] == "paused"
    assert "CURRENT is v3" in decided["reason"]
    assert read_current(registry, "m") == "v3" and read_active(registry, "m") is not None
