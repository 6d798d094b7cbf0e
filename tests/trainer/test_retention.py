"""Pruning also clears what killed writers left behind, and nothing else."""

from __future__ import annotations

import os
import time
from pathlib import Path

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
