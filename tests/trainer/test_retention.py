"""Pruning also clears what killed writers left behind, and nothing else."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from tests.support import publish, random_ensemble
from trainer.retention import STALE_TEMPORARY_SECONDS, prune_versions


def _aged(path: Path, seconds: float) -> Path:
    then = time.time() - seconds
    os.utime(path, (then, then))
    return path


def test_stale_temporaries_go_and_live_writes_stay(tmp_path: Path) -> None:
    publish(tmp_path, random_ensemble(3), version="v1")
    model_dir = tmp_path / "m"
    killed_version = model_dir / ".v2.k1ll3d"  # a version directory a kill -9 left unrenamed
    killed_version.mkdir()
    (killed_version / "model.json").write_bytes(b"{}")
    _aged(killed_version, STALE_TEMPORARY_SECONDS + 60)
    killed_current = model_dir / ".CURRENT.abc123"
    killed_current.write_bytes(b"v2")
    _aged(killed_current, STALE_TEMPORARY_SECONDS + 60)
    writing = model_dir / ".v3.w0rk1n"  # another process's write in progress
    writing.mkdir()
    lock = model_dir / ".lock"
    lock.touch()
    _aged(lock, STALE_TEMPORARY_SECONDS + 60)
    before = {p.name for p in model_dir.iterdir()}
    assert prune_versions(tmp_path, "m", keep=5) == []
    left = {p.name for p in model_dir.iterdir()}
    assert left == before - {".v2.k1ll3d", ".CURRENT.abc123"}
    assert {".lock", ".v3.w0rk1n", "CURRENT", "v1"} <= left


def test_a_prune_killed_mid_delete_leaves_no_half_version_and_old_ones_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk trial: prunes killed during their delete left version directories without a
    manifest (k01, k13), which no later prune counted or removed; `--keep 3` kept 5."""
    for i in range(1, 4):
        publish(tmp_path, random_ensemble(3, seed=i), version=f"v{i}")
    model_dir = tmp_path / "m"
    half = model_dir / "v0"  # what an older prune's kill left: files, no manifest
    half.mkdir()
    (half / "model.json").write_bytes(b"{}")
    _aged(half, STALE_TEMPORARY_SECONDS + 60)
    records = model_dir / "experiments"  # the experiments' records: never a leftover
    records.mkdir()
    _aged(records, STALE_TEMPORARY_SECONDS + 60)

    def killed(path: Path) -> None:
        (Path(path) / "manifest.json").unlink()  # the delete got this far
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(shutil, "rmtree", killed)
        with pytest.raises(KeyboardInterrupt):
            prune_versions(tmp_path, "m", keep=2)
    # v1 went from the listing at once: no version directory without a manifest
    assert {p.name for p in model_dir.iterdir() if not p.name.startswith(".")} == {
        "v0",
        "v2",
        "v3",
        "experiments",
        "CURRENT",
        "HISTORY",
    }
    assert (model_dir / ".v1.pruned").is_dir()  # a dot-named leftover, removed once stale
    prune_versions(tmp_path, "m", keep=2)  # the next publish's prune
    left = {p.name for p in model_dir.iterdir()}
    assert "v0" not in left and "experiments" in left and {"v2", "v3"} <= left
