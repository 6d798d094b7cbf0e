from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.artifacts.store import list_versions, load_version, read_current
from tests.trainer.nightly.conftest import write_config
from trainer.cli import app
from trainer.commands.nightly import seconds_until
from trainer.data.loader import load_dataset
from trainer.nightly.config import load_config
from trainer.nightly.partitions import find_partitions
from trainer.nightly.run import NightlyRefused, load_data, run_nightly


def test_partitions_newest_first_and_time_split(partitioned: Path, tmp_path: Path) -> None:
    parts = find_partitions(partitioned, 2)
    assert [str(p.date) for p in parts] == ["2026-11-20", "2026-11-21"]
    config = load_config(write_config(tmp_path, partitioned))
    data = load_data(config)
    newest = load_dataset(partitioned / "2026-11-21" / "part-0.txt", num_features=300)
    assert data.holdout.num_queries == newest.num_queries  # the newest day is held out
    assert data.train.num_queries + data.valid.num_queries + newest.num_queries == 201


def test_publishes_then_gates_against_the_deployed_model(partitioned: Path, tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, partitioned))
    first = run_nightly(config)
    registry = tmp_path / "registry"
    assert read_current(registry, "nightly") == first.published.version
    report = json.loads((first.report_dir / "report.json").read_text())
    assert report["gate"]["passed"] and report["gate"]["deployed"] is None
    assert report["history"]["valid"] and report["feature_importance"]
    assert (first.report_dir / "report.html").read_text().startswith("<!doctype html>")
    # The same configuration again scores the same on the same held-out day: it passes.
    second = run_nightly(config)
    assert second.published.previous == first.published.version
    assert second.gate.deployed is not None
    assert second.gate.deployed["version"] == first.published.version
    # Each version is explained, with the change from the deployed one (none the first time).
    views = report["explanations"]
    assert views["deployed"] is None and views["candidate"]["method"] == "treeshap"
    views = json.loads((second.report_dir / "report.json").read_text())["explanations"]
    assert views["deployed"] is not None and views["changes"] and not views["notes"]
    top = views["changes"][0]
    assert top["change"] == pytest.approx(top["candidate"] - top["deployed"])
    page = (second.report_dir / "report.html").read_text()
    assert "Why it ranks as it does" in page and "Change from the deployed model" in page


def test_a_worse_candidate_is_refused_and_nothing_changes(
    partitioned: Path, tmp_path: Path
) -> None:
    good = load_config(write_config(tmp_path, partitioned, num_trees=60))
    deployed = run_nightly(good).published.version
    bad = load_config(write_config(tmp_path, partitioned, num_trees=1, num_leaves=2))
    with pytest.raises(NightlyRefused, match="below the deployed model") as info:
        run_nightly(bad)
    assert (info.value.report_dir / "report.html").is_file()
    registry = tmp_path / "registry"
    assert read_current(registry, "nightly") == deployed
    assert list_versions(registry, "nightly") == [deployed]
    load_version(registry / "nightly" / deployed)
    # A relative tolerance as wide as the whole metric lets the same candidate through.
    lenient = load_config(
        write_config(tmp_path, partitioned, num_trees=1, num_leaves=2),
        {"gate.relative_tolerance": 1.0},
    )
    assert run_nightly(lenient).gate.passed


def test_cli_bad_data_exits_nonzero_and_leaves_the_deployed_model(
    partitioned: Path, tmp_path: Path
) -> None:
    config = write_config(tmp_path, partitioned)
    runner = CliRunner()
    ok = runner.invoke(app, ["nightly", "--config", str(config), "--json"])
    assert ok.exit_code == 0, ok.output
    deployed = json.loads(ok.stdout.strip().splitlines()[-1])["version"]
    broken = tmp_path / "broken"
    (broken / "2026-11-22").mkdir(parents=True)
    (broken / "2026-11-22" / "part-0.txt").write_text("1 qid:1 1:0.5\nnot-a-label qid:1 1:0.2\n")
    bad = runner.invoke(app, ["nightly", "--config", str(config), "--data", str(broken)])
    assert bad.exit_code != 0
    assert "part-0.txt:2" in bad.output
    assert read_current(tmp_path / "registry", "nightly") == deployed


def test_bootstrap_only_when_the_registry_is_empty(tmp_path: Path) -> None:
    config = write_config(tmp_path, tmp_path / "no-data-yet")
    runner = CliRunner()
    first = runner.invoke(app, ["nightly", "--config", str(config), "--bootstrap-demo"])
    assert first.exit_code == 0, first.output
    version = read_current(tmp_path / "registry", "nightly")
    assert version is not None
    # The summary says what it trained on (it did not: a trial could not tell).
    assert f"published nightly {version} trained on bundled demo data" in first.stdout
    again = runner.invoke(app, ["nightly", "--config", str(config), "--bootstrap-demo"])
    assert again.exit_code == 0 and "nothing to bootstrap" in again.output
    # With --json, one object (it was the text line).
    args = ["nightly", "--config", str(config), "--bootstrap-demo", "--json"]
    as_json = runner.invoke(app, args)
    assert json.loads(as_json.stdout) == {
        "status": "nothing_to_bootstrap",
        "model": "nightly",
        "deployed": version,
    }
    # --at without --loop ran at once and published.
    at = runner.invoke(app, ["nightly", "--config", str(config), "--at", "03:00"])
    assert at.exit_code == 2 and "--at goes with --loop" in at.stderr
    assert read_current(tmp_path / "registry", "nightly") == version
    missing = runner.invoke(app, ["nightly", "--config", str(config)])
    assert missing.exit_code != 0 and "no-data-yet" in missing.output


def test_bad_config_names_the_file_and_field(tmp_path: Path) -> None:
    config = tmp_path / "n.toml"
    config.write_text("[gate]\ntolerance = -1\n")
    result = CliRunner().invoke(app, ["nightly", "--config", str(config)])
    assert result.exit_code != 0
    assert "n.toml:2: gate.tolerance" in result.output


def test_seconds_until_next_run() -> None:
    now = dt.datetime(2026, 11, 22, 1, 30)
    assert seconds_until("02:00", now) == 1800
    assert seconds_until("01:00", now) == 23.5 * 3600
    with pytest.raises(ValueError, match="HH:MM"):
        seconds_until("2am", now)


def test_a_publish_failing_on_the_disk_keeps_the_report_with_the_refused_ones(
    tmp_path: Path, partitioned: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk trial: a nightly whose publish hit a full registry disk left its candidate among
    the candidates, its report reading like a passed run's; a killed run's candidate stayed
    for ever."""
    import errno
    import os
    import time

    import trainer.nightly.run as nightly_run

    config = load_config(write_config(tmp_path, partitioned))
    killed = config.work_dir / "candidates" / "20260101T000000000000Z-dead01"
    killed.mkdir(parents=True)
    then = time.time() - nightly_run.STALE_CANDIDATE_SECONDS - 60
    os.utime(killed, (then, then))

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device while installing the version")

    monkeypatch.setattr(nightly_run, "_publish", full)
    with pytest.raises(ValueError, match="No space left on device") as info:
        run_nightly(config)
    refused = list((config.work_dir / "refused").iterdir())
    assert len(refused) == 1 and f"nothing published (report: {refused[0]})" in str(info.value)
    report = json.loads((refused[0] / "report.json").read_text())
    assert "No space left on device" in report["publish_error"]
    assert list((config.work_dir / "candidates").iterdir()) == []  # the killed one went too
    assert read_current(tmp_path / "registry", "nightly") is None


def test_a_registry_too_full_for_the_report_still_says_the_version_is_published(
    tmp_path: Path,
    partitioned: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An operations trial: a registry that filled up while the report was copied beside the
    new version (CURRENT had moved) failed the run with "nothing published", wrote a refused
    report for a serving version and left a torn report.json in the registry."""
    import errno
    import shutil

    import trainer.nightly.run as nightly_run

    original = shutil.copy2

    def full_for_json(src: Path, dst: Path) -> object:
        if Path(src).name == "report.json":
            Path(dst).write_bytes(Path(src).read_bytes()[:10])  # torn, as a full disk leaves it
            raise OSError(errno.ENOSPC, "No space left on device", str(dst))
        return original(src, dst)

    config = load_config(write_config(tmp_path, partitioned))
    monkeypatch.setattr(nightly_run.shutil, "copy2", full_for_json)
    outcome = run_nightly(config)
    version = outcome.published.version
    assert read_current(tmp_path / "registry", "nightly") == version
    installed = tmp_path / "registry" / "nightly" / version
    assert sorted(p.name for p in installed.iterdir() if p.name.startswith((".", "report"))) == []
    kept = config.work_dir / "published" / version
    assert outcome.report_dir == kept
    assert json.loads((kept / "report.json").read_text())["gate"]["passed"] is True
    assert (kept / "report.html").is_file()
    assert not (config.work_dir / "refused").exists()
    assert list((config.work_dir / "candidates").iterdir()) == []
    warned = [
        r.getMessage() for r in caplog.records if "is published and serving" in r.getMessage()
    ]
    assert len(warned) == 1 and f"kept in {kept}" in warned[0]
    assert f"{installed / '.report.json.partial'}: no space left" in warned[0]


def test_a_full_work_dir_after_training_names_the_file_and_frees_the_candidate(
    tmp_path: Path, partitioned: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk trial: a work_dir that filled up while the report was written failed the run
    with a bare "[Errno 28] No space left on device" (no path) and left the candidate, with a
    torn report.json, filling the disk."""
    import errno

    original = Path.write_bytes

    def full_for_reports(path: Path, data: bytes) -> int:
        if path.name.startswith("report."):
            original(path, data[:10])  # torn, as a full disk leaves it
            raise OSError(errno.ENOSPC, "No space left on device")
        return original(path, data)

    config = load_config(write_config(tmp_path, partitioned))
    monkeypatch.setattr(Path, "write_bytes", full_for_reports)
    with pytest.raises(ValueError) as info:
        run_nightly(config)
    candidates = config.work_dir / "candidates"
    assert str(candidates) in str(info.value) and "report.json: no space left" in str(info.value)
    assert list(candidates.iterdir()) == []
    assert read_current(tmp_path / "registry", "nightly") is None


def test_a_model_directory_that_is_not_writable_fails_before_training(
    tmp_path: Path, partitioned: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operations trial: with `<registry>/<model>/` read-only (the registry root writable),
    the whole training ran before the install failed. Root passes any permission check, so the
    check's answer is what is stood in for here."""
    import os

    import trainer.nightly.run as nightly_run

    config = load_config(write_config(tmp_path, partitioned))
    model_dir = config.publish.registry / config.model.name
    model_dir.mkdir(parents=True)
    real = os.access
    monkeypatch.setattr(
        nightly_run.os, "access", lambda p, mode: Path(p) != model_dir and real(p, mode)
    )
    trained: list[object] = []
    monkeypatch.setattr(nightly_run, "train_candidate", lambda *a, **k: trained.append(a))
    from trainer.commands.errors import CommandError

    with pytest.raises(CommandError, match=f"publish.registry: {model_dir} is not writable"):
        run_nightly(config)
    assert trained == []


def test_refused_reports_are_kept_to_the_newest(
    tmp_path: Path, partitioned: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operations trial: refused/ grew without limit (1-2 MB a report)."""
    import trainer.nightly.run as nightly_run

    monkeypatch.setattr(nightly_run, "REFUSED_REPORTS_KEPT", 2)
    config = load_config(write_config(tmp_path, partitioned))
    refused = config.work_dir / "refused"
    for stamp in ("20260101T000000000000Z-aaaaaa", "20260102T000000000000Z-bbbbbb"):
        (refused / stamp).mkdir(parents=True)

    def full(*args: object, **kwargs: object) -> None:
        import errno

        raise OSError(errno.ENOSPC, "No space left on device while installing the version")

    monkeypatch.setattr(nightly_run, "_publish", full)  # refused at publish: a report is kept
    with pytest.raises(ValueError):
        run_nightly(config)
    kept = sorted(p.name for p in refused.iterdir())
    assert len(kept) == 2 and kept[0] == "20260102T000000000000Z-bbbbbb"
