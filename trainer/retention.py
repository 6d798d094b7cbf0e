"""Which version a rollback returns to, and which versions pruning may delete.

Version names are free-form, so neither question is answered by sorting them: rollback
follows HISTORY (the values CURRENT has had), pruning follows install order, and neither may
take away a version something still points at (CURRENT, the rollback target, the running
experiment's control and candidate).
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

from app.artifacts.lock import LOCK_FILE
from app.artifacts.store import (
    HISTORY_GAP,
    MANIFEST_FILE,
    ArtifactError,
    list_versions,
    read_current,
    read_history,
)
from app.registry.experiments import RECORDS_DIR, ExperimentError, list_records, read_active
from trainer.experiments.experiment_file import refused_note

log = logging.getLogger(__name__)


class PreviousUnknown(ArtifactError):
    """HISTORY does not say which version CURRENT named before the present one."""


def rollback_target(registry: Path, name: str) -> str | None:
    """The version CURRENT named before the present one (still on disk), else None;
    PreviousUnknown when something that does not keep HISTORY moved CURRENT since (an older
    release's publish or rollback: following HISTORY past it redeployed a version rolled back
    from, or skipped the one in between).

    Registries written before HISTORY existed fall back to the control of the experiment that
    promoted CURRENT, then to the version installed just before CURRENT."""
    current = read_current(registry, name)
    versions = list_versions(registry, name)
    if current is None:
        return None
    history = read_history(registry, name)
    for version in reversed(history[:-1]):
        if version == HISTORY_GAP:
            raise PreviousUnknown(_unknown_previous(registry, name, current, history, versions))
        if version != current and version in versions:
            return version
    promoted = [
        r
        for r in list_records(registry)
        if r.spec.model == name and r.status == "promoted" and r.spec.candidate == current
    ]
    if promoted:
        control = max(promoted, key=lambda r: r.ended_at or r.spec.started_at).spec.control
        if control in versions:
            return control
    if current in versions:
        earlier = versions[: versions.index(current)]
        if earlier:
            return earlier[-1]
    return None


def _unknown_previous(
    registry: Path, name: str, current: str, history: list[str], versions: list[str]
) -> str:
    last_gap = len(history) - 1 - history[::-1].index(HISTORY_GAP)
    recorded = [v for v in history[:last_gap] if v != HISTORY_GAP]
    newest_first = ", ".join(reversed(versions))
    return (
        f"{Path(registry) / name}: HISTORY does not say which version came before CURRENT "
        f"{current}: CURRENT was moved, at or before {current}, by something that does not "
        f"keep HISTORY (an older ltr's publish or rollback, a hand edit, or a publish stopped "
        f"between writing CURRENT and HISTORY); before that, "
        f"HISTORY last recorded {recorded[-1] if recorded else 'nothing'}. Name the version: "
        f"ltr publish --rollback --name {name} --to VERSION (installed, newest first: "
        f"{newest_first})"
    )


def protected_versions(registry: Path, name: str) -> set[str]:
    """Versions pruning must keep; ExperimentError when EXPERIMENT cannot be read (then what
    it protects is unknown)."""
    try:
        target = rollback_target(registry, name)
    except PreviousUnknown:
        target = None  # pruning keeps the newest installed versions, whatever came between
    protected = {read_current(registry, name), target}
    spec = read_active(registry, name)
    if spec is not None:
        protected |= {spec.control, spec.candidate}
    return {v for v in protected if v is not None}


def prune_versions(registry: Path, name: str, keep: int) -> list[str]:
    """Delete all but the `keep` most recently installed versions, never a protected one.
    Callers hold the model's lock (app.artifacts.lock)."""
    if keep < 1:
        raise ValueError("keep must be at least 1")
    try:
        protected = protected_versions(registry, name)
    except ExperimentError as exc:
        log.warning("not pruning %s: %s: %s", Path(registry) / name, exc, refused_note(name))
        return []
    versions = list_versions(registry, name)
    removable = [v for v in versions[: max(len(versions) - keep, 0)] if v not in protected]
    for version in removable:
        # Renamed out of the way first: a prune killed halfway through the delete left a
        # version directory without its manifest, which no later prune counted or removed.
        doomed = Path(registry) / name / f".{version}.pruned"
        (Path(registry) / name / version).rename(doomed)
        shutil.rmtree(doomed)
    remove_stale_temporaries(Path(registry) / name)
    return removable


# A version directory or CURRENT/HISTORY file being written lives under a dot-name beside its
# final one for seconds; one this old was left by a writer that was killed (kill -9, a node
# lost), and nothing will ever rename it into place.
STALE_TEMPORARY_SECONDS = 6 * 3600


def remove_stale_temporaries(model_dir: Path, now: float | None = None) -> list[str]:
    """Delete the leftovers of killed writers in `model_dir`: dot-named ones (never the lock
    file), and version directories without a manifest (a delete cut short: a version is
    renamed into place complete); their names, for the log."""
    now = time.time() if now is None else now
    removed = []
    for path in model_dir.iterdir() if model_dir.is_dir() else ():
        if path.name == LOCK_FILE:
            continue
        if not path.name.startswith(".") and not _version_without_manifest(path):
            continue
        try:
            if now - path.lstat().st_mtime < STALE_TEMPORARY_SECONDS:
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        except FileNotFoundError:
            continue
        removed.append(path.name)
    if removed:
        log.info("removed leftovers of interrupted writes in %s: %s", model_dir, removed)
    return removed


def _version_without_manifest(path: Path) -> bool:
    if path.name == RECORDS_DIR or not path.is_dir() or path.is_symlink():
        return False  # the experiments' records, or no directory
    return not (path / MANIFEST_FILE).exists()
