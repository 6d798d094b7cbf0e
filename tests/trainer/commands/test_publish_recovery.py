"""A black-box trial of `ltr publish`: a corrupt installed copy it could not repair, a full
disk reported without a path and leaving a version behind, a rollback's --json without
`announced`, and Redis down with no way forward named."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.artifacts.manifest import FeatureSource
from app.artifacts.store import load_version, read_current
from app.artifacts.tree_dump import TreeEnsemble
from tests.support import stump
from tests.support.redis_server import free_port
from tests.support.sourced_model import item_table, publish_sourced
from tests.trainer.commands.test_publish_experiment import ltr_publish
from tests.trainer.registry_versions import run_version


def test_publishing_over_a_corrupt_installed_copy_repairs_it(tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    v1, v2 = run_version(tmp_path / "runs", "v1"), run_version(tmp_path / "runs", "v2", leaf=2.0)
    assert ltr_publish(registry, "--model", str(v1))[0] == 0
    assert ltr_publish(registry, "--model", str(v2))[0] == 0
    installed = registry / "m" / "v2" / "model.json"
    os.truncate(installed, 10)  # the trial's `truncate -s`

    code, out, err = ltr_publish(registry, "--model", str(v2), "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["repaired"] is True and "sha256 mismatch" in result["repaired_reason"]
    assert "note: repaired" in err and "did not verify" in err
    assert load_version(registry / "m" / "v2").manifest.version == "v2"  # verifies again
    assert read_current(registry, "m") == "v2"
    # Only the version directories: the repair's staging directory is gone.
    assert sorted(p.name for p in (registry / "m").iterdir() if p.is_dir()) == ["v1", "v2"]

    code, out, err = ltr_publish(registry, "--model", str(v2))  # whole now: nothing to repair
    assert code == 0 and "repaired" not in err
    os.truncate(installed, 10)
    code, out, err = ltr_publish(registry, "--model", str(v2))  # the text output says it too
    assert code == 0 and "note: repaired" in err and "published m v2" in out


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 5 MB tmpfs (as the trial's registry); skipped where mounting is not allowed."""
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=5m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def fill(disk: Path, leave_pages: int = 0) -> None:
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize
    with open(disk / "filler", "wb") as fh, contextlib.suppress(OSError):  # full
        fh.write(b"\0" * (free - leave_pages * st.f_frsize))


@pytest.mark.parametrize(("room", "stage"), [(0, "installing"), (2, "moving CURRENT to v2")])
def test_a_full_disk_names_the_path_and_step_and_leaves_nothing_installed(
    tmp_path: Path, tiny_disk: Path, room: int, stage: str
) -> None:
    """Room for nothing, or for the version's two files but not CURRENT's new copy (where the
    version directory was left installed while CURRENT stayed old)."""
    registry = tiny_disk / "reg"
    v1, v2 = run_version(tmp_path / "runs", "v1"), run_version(tmp_path / "runs", "v2", leaf=2.0)
    assert ltr_publish(registry, "--model", str(v1))[0] == 0
    fill(tiny_disk, room)
    code, _, err = ltr_publish(registry, "--model", str(v2))
    assert code == 2
    line = err.strip()
    assert line.startswith(f"error: {registry / 'm'}/"), line
    assert "no space left on device" in line and f"while {stage}" in line
    assert "CURRENT stays v1" in line
    assert read_current(registry, "m") == "v1"
    assert sorted(p.name for p in (registry / "m").iterdir() if p.is_dir()) == ["v1"]


@pytest.mark.parametrize(
    ("patched", "stage"),
    [("write_version_dir", "installing"), ("set_current", "moving CURRENT to v2")],
)
def test_a_full_disk_as_the_publish_sees_it_without_mounting_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, patched: str, stage: str
) -> None:
    """The same refusal where a tmpfs cannot be mounted (not root): the step's write fails
    with ENOSPC, as a full disk makes it."""
    from typer.testing import CliRunner

    import trainer.publish
    from trainer.cli import app

    registry = tmp_path / "reg"
    v1, v2 = run_version(tmp_path / "runs", "v1"), run_version(tmp_path / "runs", "v2", leaf=2.0)
    assert ltr_publish(registry, "--model", str(v1))[0] == 0

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(trainer.publish, patched, full)
    result = CliRunner().invoke(app, ["publish", "--model", str(v2), "--registry", str(registry)])
    assert result.exit_code == 2
    line = result.stderr.strip()
    assert line.startswith(f"error: {registry / 'm'}/"), line
    assert "no space left on device" in line and f"while {stage}" in line
    assert "CURRENT stays v1" in line
    assert read_current(registry, "m") == "v1"
    assert sorted(p.name for p in (registry / "m").iterdir() if p.is_dir()) == ["v1"]


def test_rollback_json_says_whether_it_announced_and_text_says_services_poll(
    tmp_path: Path,
) -> None:
    registry = tmp_path / "registry"
    for version, leaf in (("v1", 1.0), ("v2", 2.0), ("v3", 3.0)):
        assert (
            ltr_publish(registry, "--model", str(run_version(tmp_path, version, leaf=leaf)))[0] == 0
        )
    code, out, err = ltr_publish(registry, "--rollback", "--name", "m", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["announced"] is False and result["redis_pushed"] is False
    assert "next registry poll" in err and "no --redis-url" in err

    down = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    code, out, err = ltr_publish(registry, "--rollback", "--name", "m", "--redis-url", down)
    assert code == 0, err
    assert "CURRENT v2 -> v1" in out
    assert "Redis could not be reached" in err and "next registry poll" in err


def items_version(runs: Path, version: str) -> Path:
    names = ["price", "ctr"]
    sources: dict[str, FeatureSource] = dict.fromkeys(names, "item")
    table = item_table(20, names, seed=1)
    ensemble = TreeEnsemble(2, [stump()])
    return publish_sourced(runs, ensemble, sources, table, version=version, feature_names=names)


def test_redis_down_says_how_to_deploy_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LTR_REDIS_URL", raising=False)
    registry = tmp_path / "registry"
    down = f"redis://127.0.0.1:{free_port()}/0"
    v1 = items_version(tmp_path / "runs", "v1")
    code, _, err = ltr_publish(registry, "--model", str(v1), "--redis-url", down)
    assert code == 2
    line = err.strip()
    assert "could not be made live in Redis" in line, line
    assert "without --redis-url" in line and "LTR_REDIS_URL" in line
    assert f"ltr features push --set catalog --model {v1}" in line
    assert not (registry / "m" / "v1").exists()  # the refused publish removed its version

    # The way forward it names works; a rollback with Redis down names the same way.
    assert ltr_publish(registry, "--model", str(v1))[0] == 0
    assert ltr_publish(registry, "--model", str(items_version(tmp_path / "runs", "v2")))[0] == 0
    code, _, err = ltr_publish(registry, "--rollback", "--name", "m", "--redis-url", down)
    assert code == 2 and "without --redis-url" in err
    assert f"--model {registry / 'm' / 'v1'}" in err and read_current(registry, "m") == "v2"


def test_history_unwritable_after_current_moved_keeps_the_publish_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import trainer.publish as module
    from app.artifacts.store import write_atomic

    def current_only(registry: Path, name: str, version: str, **_: object) -> None:
        write_atomic(registry / name / "CURRENT", f"{version}\n".encode())
        raise OSError(28, "No space left on device")  # HISTORY's write

    registry = tmp_path / "registry"
    assert ltr_publish(registry, "--model", str(run_version(tmp_path / "runs", "v1")))[0] == 0
    monkeypatch.setattr(module, "set_current", current_only)
    code, out, err = ltr_publish(registry, "--model", str(run_version(tmp_path / "runs", "v2")))
    assert code == 0 and "published m v2" in out
    assert "HISTORY: could not record v2" in err and read_current(registry, "m") == "v2"
    assert "a rollback from it needs --to VERSION" in err
    monkeypatch.undo()
    code, _, err = ltr_publish(registry, "--rollback", "--name", "m")
    assert code == 2 and "--to VERSION" in err and read_current(registry, "m") == "v2"
    assert ltr_publish(registry, "--rollback", "--name", "m", "--to", "v1")[0] == 0
    assert read_current(registry, "m") == "v1"
