"""A running experiment whose candidate version left the registry (moved away): services refuse
it, `status` says so, and `decide --dry-run` reports what the real run hits. A trial: status
said "running" and the dry run "promote ... p = 5.56e-08", while the real decide exited 2 with
".../manifest.json: cannot read"."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.artifacts.store import read_current
from app.registry.experiments import find_record, read_active
from tests.trainer.experiments.conftest import read_json, write_logs
from tests.trainer.experiments.test_experiment_cli import ltr, start


@pytest.fixture
def moved(registry: Path, tmp_path: Path) -> Path:
    """Experiment m-v2 with logs the candidate wins, then v2's directory moved away."""
    assert start(registry)[0] == 0
    spec = read_active(registry, "m")
    assert spec is not None
    logs = write_logs(tmp_path / "imp.jsonl", spec, 1500, candidate_share=0.65)
    (registry / "m" / "v2").rename(tmp_path / "v2-moved")
    return logs


def test_status_says_the_candidate_does_not_load(registry: Path, moved: Path) -> None:
    code, out, err = ltr("status", "--registry", str(registry))
    assert code == 0, err
    (line,) = out.splitlines()
    assert line.startswith("m-v2: m control v1 vs candidate v2 (interleave, 10 %) refused — ")
    manifest = registry / "m" / "v2" / "manifest.json"
    assert f"its candidate v2 does not load ({manifest}: cannot read" in line
    assert "services serve v1 alone" in line and "ltr experiment stop --name m" in line
    code, out, _ = ltr("status", "--registry", str(registry), "--json")
    (exp,) = read_json(out)["experiments"]
    assert exp["status"] == "refused" and exp["paused"] is None
    assert "its candidate v2 does not load" in exp["refused"]


def test_a_dry_run_reports_what_the_real_decide_hits(registry: Path, moved: Path) -> None:
    args = ["decide", "--registry", str(registry), "--name", "m", "--logs", str(moved)]
    dry = ltr(*args, "--dry-run")
    real = ltr(*args)
    manifest = registry / "m" / "v2" / "manifest.json"
    for code, out, err in (dry, real):
        assert code == 2 and out == ""
        (line,) = err.strip().splitlines()
        assert line.startswith(f"error: {manifest}: cannot read"), line
        assert line.endswith(
            ": candidate v2 of experiment m-v2 cannot be promoted (CURRENT stays v1)"
        ), line
    assert dry[2] == real[2]
    assert read_current(registry, "m") == "v1" and read_active(registry, "m") is not None
    assert find_record(registry, "m-v2").status == "running"


def test_a_candidate_put_back_runs_again(registry: Path, moved: Path, tmp_path: Path) -> None:
    (tmp_path / "v2-moved").rename(registry / "m" / "v2")
    code, out, _ = ltr("status", "--registry", str(registry), "--json")
    (exp,) = read_json(out)["experiments"]
    assert exp["status"] == "running" and exp["refused"] is None
    args = ["decide", "--registry", str(registry), "--name", "m", "--logs", str(moved)]
    code, out, err = ltr(*args, "--dry-run")
    assert code == 0 and "promote" in out, err
