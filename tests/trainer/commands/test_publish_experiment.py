"""`ltr publish` beside an experiment: moving CURRENT away from the control says the experiment
pauses, a candidate `experiment start` would refuse says so, and the hint names the registry."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from app.artifacts.store import read_current
from tests.trainer.registry_versions import run_version
from trainer.cli import app
from trainer.experiments.lifecycle import start_experiment
from trainer.publish import publish

runner = CliRunner()


def ltr_publish(registry: Path, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["publish", "--registry", str(registry), *args])
    return result.exit_code, result.stdout, result.stderr


def experimenting(tmp_path: Path) -> Path:
    """Registry: v1 CURRENT, experiment m-v2 (candidate v2) running."""
    registry = tmp_path / "registry"
    publish(run_version(tmp_path / "runs", "v1"), registry)
    publish(run_version(tmp_path / "runs", "v2", leaf=2.0), registry, as_candidate=True)
    start_experiment(registry, "m", "v2", mode="interleave", traffic=0.5)
    return registry


def test_publishing_over_a_running_experiment_warns_that_it_pauses(tmp_path: Path) -> None:
    registry = experimenting(tmp_path)
    v3 = run_version(tmp_path / "runs", "v3", leaf=3.0)
    code, out, err = ltr_publish(registry, "--model", str(v3))
    assert code == 0, err
    assert "published m v3" in out and read_current(registry, "m") == "v3"
    assert "experiment m-v2 pauses" in err and "CURRENT is v1 again" in err
    # Back to the control (a rollback here): nothing pauses, nothing to say.
    code, out, err = ltr_publish(registry, "--rollback", "--name", "m")
    assert code == 0 and read_current(registry, "m") == "v1" and "pauses" not in err


def test_rolling_back_away_from_the_control_warns_too(tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    publish(run_version(tmp_path / "runs", "v0"), registry)
    publish(run_version(tmp_path / "runs", "v1", leaf=1.5), registry)
    publish(run_version(tmp_path / "runs", "v2", leaf=2.0), registry, as_candidate=True)
    start_experiment(registry, "m", "v2", mode="interleave", traffic=0.5)
    code, _, err = ltr_publish(registry, "--rollback", "--name", "m")
    assert code == 0 and read_current(registry, "m") == "v0"
    assert "experiment m-v2 pauses" in err


def test_a_candidate_with_other_features_is_warned_about(tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    publish(run_version(tmp_path / "runs", "v1"), registry)
    wide = run_version(tmp_path / "runs", "v2", features=("a", "b", "c"))
    code, _, err = ltr_publish(registry, "--model", str(wide), "--candidate")
    assert code == 0, err
    assert "warning: m v2 cannot be compared with CURRENT v1" in err
    assert "feature names differ" in err and "experiment start` will refuse it" in err
    same = run_version(tmp_path / "runs", "v3", leaf=3.0)
    code, _, err = ltr_publish(registry, "--model", str(same), "--candidate")
    assert code == 0 and err == ""


def test_the_candidate_hint_names_the_registry(tmp_path: Path) -> None:
    registry = tmp_path / "my registry"
    publish(run_version(tmp_path / "runs", "v1"), registry)
    v2 = run_version(tmp_path / "runs", "v2", leaf=2.0)
    code, out, err = ltr_publish(registry, "--model", str(v2), "--candidate")
    assert code == 0, err
    assert f"ltr experiment start --name m --candidate v2 --registry '{registry}'" in out
