"""Rollback follows what CURRENT named before and pruning follows install order, never the
order of free-form version names (`v10` sorts before `v9`)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.artifacts.store import (
    HISTORY_GAP,
    ArtifactError,
    list_versions,
    read_current,
    write_atomic,
)
from app.registry.experiments import experiment_path, record_path
from tests.trainer.registry_versions import run_version
from trainer.cli import app
from trainer.experiments.lifecycle import end_experiment, start_experiment
from trainer.publish import publish, rollback
from trainer.retention import PreviousUnknown


def test_rollback_returns_to_v9_from_v10(tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    publish(run_version(tmp_path / "runs", "v9"), registry)
    publish(run_version(tmp_path / "runs", "v10", leaf=2.0), registry)
    assert rollback(registry, "m") == ("v10", "v9")
    assert read_current(registry, "m") == "v9"


def test_rollback_after_a_promotion_returns_to_the_control(tmp_path: Path) -> None:
    """The tester's registry: dnn1, v1 (300 features), v13 deployed, v10 promoted by an
    experiment. Rollback must go back to v13, not to v1 (name order)."""
    registry, runs = tmp_path / "registry", tmp_path / "runs"
    wide = tuple(f"f{i}" for i in range(300))
    for version, features in (("dnn1", wide), ("v1", wide), ("v13", ("a", "b"))):
        publish(run_version(runs, version, features), registry)
    publish(run_version(runs, "v10", leaf=3.0), registry, as_candidate=True)
    spec = start_experiment(registry, "m", "v10", mode="interleave", traffic=0.5)
    end_experiment(registry, spec, "promoted", "won")
    assert read_current(registry, "m") == "v10"
    assert rollback(registry, "m") == ("v10", "v13")


def test_rolling_back_again_goes_further_back(tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    for i, version in enumerate(("v1", "v2", "v3")):
        publish(run_version(tmp_path / "runs", version, leaf=float(i)), registry)
    assert rollback(registry, "m") == ("v3", "v2")
    assert rollback(registry, "m") == ("v2", "v1")
    with pytest.raises(ArtifactError, match="no version before v1"):
        rollback(registry, "m")
    assert read_current(registry, "m") == "v1"


def test_a_registry_without_history_rolls_back_by_install_order(tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    for version in ("v9", "v10"):
        run_version(registry / "m", version)
    write_atomic(registry / "m" / "CURRENT", b"v10\n")  # as an older release left it
    assert rollback(registry, "m") == ("v10", "v9")


def test_pruning_keeps_the_newest_installed_versions(tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    removed: list[str] = []
    for i, version in enumerate(("v8", "v9", "v10", "v11")):
        removed += publish(
            run_version(tmp_path / "runs", version, leaf=float(i)), registry, keep=2
        ).removed
    assert removed == ["v8", "v9"]
    assert list_versions(registry, "m") == ["v10", "v11"]


def test_pruning_never_removes_the_experiment_or_the_rollback_target(tmp_path: Path) -> None:
    registry, runs = tmp_path / "registry", tmp_path / "runs"
    publish(run_version(runs, "b1"), registry)
    publish(run_version(runs, "a-candidate", leaf=2.0), registry, as_candidate=True)
    start_experiment(registry, "m", "a-candidate", mode="interleave", traffic=0.5)
    for i in range(3):  # nightly runs while the experiment still runs: they only install
        publish(run_version(runs, f"x{i}", leaf=3.0 + i), registry, keep=1, as_candidate=True)
    assert {"b1", "a-candidate"} <= set(list_versions(registry, "m"))
    publish(run_version(runs, "c1", leaf=9.0), registry, keep=1)  # CURRENT moves on
    assert list_versions(registry, "m") == ["b1", "a-candidate", "c1"]
    assert rollback(registry, "m") == ("c1", "b1")


def test_registry_files_are_readable_by_other_users(tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    publish(run_version(tmp_path / "runs", "v1"), registry)
    publish(run_version(tmp_path / "runs", "v2", leaf=2.0), registry, as_candidate=True)
    spec = start_experiment(registry, "m", "v2", mode="interleave", traffic=0.5)
    for path in (
        registry / "m" / "CURRENT",
        registry / "m" / "HISTORY",
        experiment_path(registry, "m"),
        record_path(registry, "m", spec.name),
    ):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path


def test_cli_warns_when_the_features_change(tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    publish(run_version(tmp_path / "runs", "v1"), registry)
    wider = run_version(tmp_path / "runs", "v2", ("a", "b", "c"))
    args = ["publish", "--model", str(wider), "--registry", str(registry), "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1
    assert "v2 takes other candidate features than v1 (2 -> 3: 1 added" in warnings[0]
    # v2 adds c and removes nothing: name maps still answer (c missing), never a 422.
    assert "name maps without the added names will score them as missing" in warnings[0]
    assert "name maps with removed names will get 422" not in warnings[0]
    assert json.loads(result.stdout)["warnings"] == warnings
    back = CliRunner().invoke(
        app, ["publish", "--rollback", "--name", "m", "--registry", str(registry)]
    )
    assert back.exit_code == 0 and "v1 takes other candidate features than v2" in back.stderr
    assert "name maps with removed names will get 422 (unless" in back.stderr


def test_json_says_nothing_was_pushed_when_nothing_was(tmp_path: Path) -> None:
    """No embeddings and Redis down: neither a push nor an announcement happened."""
    v1 = run_version(tmp_path / "runs", "v1")
    args = ["publish", "--model", str(v1), "--registry", str(tmp_path / "registry"), "--json"]
    result = CliRunner().invoke(app, [*args, "--redis-url", "redis://127.0.0.1:1/0"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["redis_pushed"] is False and out["announced"] is False


def test_cli_installs_a_candidate_without_moving_current(tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    publish(run_version(tmp_path / "runs", "v1"), registry)
    v2 = run_version(tmp_path / "runs", "v2", leaf=2.0)
    args = ["publish", "--model", str(v2), "--registry", str(registry), "--candidate"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "installed m v2 as a candidate; CURRENT stays v1" in result.stdout
    assert read_current(registry, "m") == "v1" and "v2" in list_versions(registry, "m")
    start_experiment(registry, "m", "v2", mode="interleave", traffic=0.5)  # it can start


def _older_release_publishes(registry: Path, version: str, leaf: float = 5.0) -> None:
    """What a release before HISTORY (or a hand edit) did: install and move CURRENT only."""
    run_version(registry / "m", version, leaf=leaf)
    _older_release_points_current_at(registry, version)


def _older_release_points_current_at(registry: Path, version: str) -> None:
    write_atomic(registry / "m" / "CURRENT", f"{version}\n".encode())


def test_after_an_older_release_published_rollback_names_what_it_cannot_know(
    tmp_path: Path,
) -> None:
    """An upgrade trial: v01 by this release, v02 and v03 by the older one still running;
    rollback went v03 -> v01, skipping v02 (which CURRENT named just before), silently."""
    registry = tmp_path / "registry"
    publish(run_version(tmp_path / "runs", "v01"), registry)
    _older_release_publishes(registry, "v02", leaf=2.0)
    _older_release_publishes(registry, "v03", leaf=3.0)
    with pytest.raises(
        PreviousUnknown, match=r"--to VERSION \(installed, newest first: v03, v02, v01\)"
    ):
        rollback(registry, "m")
    assert read_current(registry, "m") == "v03"
    assert rollback(registry, "m", to="v02") == ("v03", "v02")
    assert rollback(registry, "m") == ("v02", "v03")  # undoes the named rollback
    with pytest.raises(PreviousUnknown):  # before v03: not known
        rollback(registry, "m")
    assert rollback(registry, "m", to="v01") == ("v03", "v01")


def test_after_an_older_release_rolled_back_the_version_rolled_back_from_is_not_redeployed(
    tmp_path: Path,
) -> None:
    """The trial's downgrade: v01, v02 published here; the older release rolled back to v01
    and published v03; rollback redeployed v02, the version the operator had left."""
    registry = tmp_path / "registry"
    for i, version in enumerate(("v01", "v02")):
        publish(run_version(tmp_path / "runs", version, leaf=float(i)), registry)
    _older_release_points_current_at(registry, "v01")
    _older_release_publishes(registry, "v03")
    with pytest.raises(PreviousUnknown, match="came before CURRENT v03: CURRENT was moved"):
        rollback(registry, "m")
    assert read_current(registry, "m") == "v03"


def test_history_resumes_after_a_gap(tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    publish(run_version(tmp_path / "runs", "v01"), registry)
    _older_release_publishes(registry, "v02")
    publish(run_version(tmp_path / "runs", "v03", leaf=3.0), registry, keep=2)  # prunes v01
    assert list_versions(registry, "m") == ["v02", "v03"]
    assert rollback(registry, "m") == ("v03", "v02")  # CURRENT just before v03: known
    assert (registry / "m" / "HISTORY").read_text().split() == ["v01", HISTORY_GAP, "v02"]


def test_cli_rollback_to_a_named_version(tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    publish(run_version(tmp_path / "runs", "v01"), registry)
    _older_release_publishes(registry, "v02")
    runner = CliRunner()
    base = ["publish", "--registry", str(registry), "--rollback", "--name", "m"]
    result = runner.invoke(app, [*base, "--json"])
    assert result.exit_code == 2
    assert "--to VERSION" in json.loads(result.stdout)["error"]
    result = runner.invoke(app, [*base, "--to", "v9"])
    assert result.exit_code == 2 and "no installed version 'v9'" in result.stderr
    result = runner.invoke(app, [*base, "--to", "v02"])
    assert result.exit_code == 2 and "CURRENT is v02 already" in result.stderr
    result = runner.invoke(app, [*base, "--to", "v01", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["to"] == "v01"
    result = runner.invoke(app, ["publish", "--registry", str(registry), "--to", "v01"])
    assert result.exit_code == 2 and "--to goes with --rollback" in result.stderr


def test_a_rollback_to_a_named_version_is_undone_by_the_next_rollback(tmp_path: Path) -> None:
    """A re-check trial: v01, v02, v03; rolled back twice to v01; --to v03; a plain rollback
    then went to v02 (install order), the version rolled back from, not to v01."""
    registry = tmp_path / "registry"
    for i, version in enumerate(("v01", "v02", "v03")):
        publish(run_version(tmp_path / "runs", version, leaf=float(i)), registry)
    assert rollback(registry, "m") == ("v03", "v02")
    assert rollback(registry, "m") == ("v02", "v01")
    assert rollback(registry, "m", to="v03") == ("v01", "v03")
    assert rollback(registry, "m") == ("v03", "v01")


def test_the_refusal_says_where_history_lost_track(tmp_path: Path) -> None:
    """A re-check trial: the refusal said CURRENT had been set by something that does not keep
    HISTORY where this release had set it, the gap lying further back."""
    registry = tmp_path / "registry"
    publish(run_version(tmp_path / "runs", "v01"), registry)
    _older_release_publishes(registry, "v02", leaf=2.0)
    publish(run_version(tmp_path / "runs", "v03", leaf=3.0), registry)
    assert rollback(registry, "m") == ("v03", "v02")
    with pytest.raises(PreviousUnknown, match=r"at or before v02, .*last recorded v01"):
        rollback(registry, "m")


def test_a_garbled_current_is_set_right_by_publish_or_rollback_to(tmp_path: Path) -> None:
    """A disk trial: CURRENT holding bytes that are not UTF-8 stopped every publish and
    rollback of the model with "'utf-8' codec can't decode byte 0xff", naming no file; the
    plain rollback then said there was no CURRENT version at all."""
    registry = tmp_path / "registry"
    for i, version in enumerate(("v01", "v02")):
        publish(run_version(tmp_path / "runs", version, leaf=float(i)), registry)
    current = registry / "m" / "CURRENT"
    current.write_bytes(b"gar\x00bage\xff\n")
    runner = CliRunner()
    base = ["publish", "--registry", str(registry), "--rollback", "--name", "m"]
    result = runner.invoke(app, base)
    assert result.exit_code == 2
    assert f"{current} names 'gar\\x00bage\ufffd', no installed version" in result.stderr
    assert "--rollback --to VERSION (installed, newest first: v02, v01)" in result.stderr
    result = runner.invoke(app, [*base, "--to", "v01"])
    assert result.exit_code == 0, result.output
    assert current.read_text() == "v01\n"
    current.write_bytes(b"\xff\xfe\n")
    publish(run_version(tmp_path / "runs", "v03", leaf=3.0), registry)
    assert current.read_text() == "v03\n"
    assert rollback(registry, "m") == ("v03", "v01")  # HISTORY: v01 (set right), v03


@pytest.mark.parametrize("name", ["../../outside", "a/b", ".hidden"])
def test_a_name_no_model_can_have_is_refused_before_anything_is_created(
    tmp_path: Path, name: str
) -> None:
    """A CLI trial: `--name ../../x` was refused after `.lock` (and its directories) had been
    created outside the registry; `--name a/b` left `a/b/.lock` inside it."""
    registry = tmp_path / "a" / "b" / "registry"
    registry.mkdir(parents=True)
    version = run_version(tmp_path / "runs", "v01")
    before = sorted(p for p in tmp_path.rglob("*"))
    runner = CliRunner()
    for args in (["--model", str(version)], ["--rollback"], ["--rollback", "--to", "v01"]):
        result = runner.invoke(app, ["publish", "--registry", str(registry), *args, "--name", name])
        assert result.exit_code == 2, result.output
        assert "is not a model name" in result.stderr, result.stderr
    assert sorted(p for p in tmp_path.rglob("*")) == before


def test_no_version_to_roll_back_to_names_the_ones_keep_removed(tmp_path: Path) -> None:
    """An operations trial: after --keep pruned v5, the refusal said only "no version before
    v6" while HISTORY still named v5."""
    registry = tmp_path / "registry"
    for i, version in enumerate(("v1", "v2", "v3")):
        publish(run_version(tmp_path / "runs", version, leaf=float(i)), registry, keep=1)
    assert list_versions(registry, "m") == ["v2", "v3"]  # CURRENT and its rollback target
    assert rollback(registry, "m") == ("v3", "v2")
    with pytest.raises(ArtifactError, match=r"no version before v2 to roll back to \(HISTORY's "
                       r"v1 was removed by --keep; publish one again"):  # fmt: skip
        rollback(registry, "m")
