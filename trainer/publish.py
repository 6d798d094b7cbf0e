"""Publishing a verified version into a registry, keeping the last N, and rolling back.

Order matters for the running services: the version directory appears whole (rename), its
embeddings reach Redis, and only then does CURRENT move and the announcement go out, so a
service that reloads finds everything it needs. Each publish or rollback holds the model's
lock throughout (app.artifacts.lock), so concurrent ones take turns.
"""

from __future__ import annotations

import io
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson

from app.artifacts.lock import check_model_name, model_lock
from app.artifacts.manifest import Manifest
from app.artifacts.store import (
    CURRENT_FILE,
    Artifact,
    ArtifactError,
    list_versions,
    load_version,
    read_current,
    read_history,
    set_current,
    write_version_dir,
)
from app.registry.experiments import ExperimentError, compatibility_errors
from trainer.experiments.experiment_file import read_experiment
from trainer.feature_change import feature_change_warnings
from trainer.retention import prune_versions, rollback_target

__all__ = [
    "ItemSetUnreachable",
    "PublishResult",
    "RollbackResult",
    "install_version",
    "prune_versions",
    "publish",
    "roll_back",
    "rollback",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PublishResult:
    name: str
    version: str
    previous: str | None
    path: Path
    removed: list[str]
    redis_pushed: bool  # the version's user embeddings were written to Redis
    item_set: str | None = None  # "set@version" made live in Redis before CURRENT moved
    # "set@version" the model was trained with but, without a Redis URL, not pushed: services
    # serve it from the version's in-process snapshot until it is pushed.
    item_set_not_pushed: str | None = None
    announced: bool = False  # the new CURRENT was announced on Redis (else services poll)
    warnings: list[str] = field(default_factory=list)  # one line each, for the operator
    # Why the copy already installed did not verify (it was replaced by the source's), if so.
    repaired: str | None = None


@dataclass(frozen=True)
class RollbackResult:
    name: str
    previous: str  # CURRENT before the rollback
    version: str  # CURRENT now
    redis_pushed: bool  # the version's user embeddings were written to Redis
    announced: bool  # the new CURRENT was announced on Redis (else services poll)


class ItemSetUnreachable(ArtifactError):
    """Redis could not be reached to make a model's item set live (the command's error line
    says how to deploy without it)."""

    def __init__(self, message: str, set_name: str, path: Path) -> None:
        super().__init__(message)
        self.set_name = set_name
        self.path = path  # the version directory whose set it is


@dataclass(frozen=True)
class _Installed:
    artifact: Artifact
    written: bool  # this call created the version directory (a failed publish removes it)
    repaired: str | None = None  # why the copy there before did not verify


def install_version(source: Path, registry: Path, name: str | None = None) -> Artifact:
    """Copy a verified version directory into `<registry>/<name>/<version>` atomically."""
    artifact = load_version(source)
    with model_lock(registry, name or artifact.manifest.name):
        return _install(artifact, registry, name).artifact


@contextmanager
def _stage(path: Path, doing: str, left: str) -> Iterator[None]:
    """An OSError in one publish step (a full disk, permissions) as `<path>: <what> while
    <doing>; <left>`: a bare "[Errno 28] No space left on device" said neither where nor what
    state the registry was left in."""
    try:
        yield
    except OSError as exc:
        raise _located(exc, path, doing, left) from exc


def _located(exc: OSError, path: Path, doing: str, left: str) -> OSError:
    return OSError(exc.errno, f"{exc.strerror or exc} while {doing}; {left}", str(path))


def _install(artifact: Artifact, registry: Path, name: str | None) -> _Installed:
    manifest = artifact.manifest
    if name is not None and name != manifest.name:
        manifest = manifest.model_copy(update={"name": name})
    final = Path(registry) / manifest.name / manifest.version
    current = read_current(registry, manifest.name)
    with _stage(final, "installing the version", f"nothing installed, CURRENT stays {current}"):
        return _install_at(final, manifest, artifact)


def _install_at(final: Path, manifest: Manifest, artifact: Artifact) -> _Installed:
    if final.is_dir():
        try:
            existing = load_version(final)
        except ArtifactError as exc:
            # The registry is written only by the trainer: publishing the verified source
            # again is how an operator repairs a corrupt or truncated installed copy.
            _replace_installed(final, manifest, artifact.all_files())
            return _Installed(load_version(final), False, str(exc))
        return _Installed(_same_version(existing, artifact, final), False)
    written = False
    if not final.exists():
        try:
            write_version_dir(final, manifest, artifact.all_files())
            written = True
        except ArtifactError:
            if not final.exists():  # refused for another reason than being there already
                raise
    return _Installed(_same_version(load_version(final), artifact, final), written)


def _same_version(existing: Artifact, artifact: Artifact, final: Path) -> Artifact:
    """The same version published again (a retry, another process) is not an error."""
    if existing.manifest.files != artifact.manifest.files:
        raise ArtifactError(f"{final} already exists with different contents")
    return existing


def _replace_installed(final: Path, manifest: Manifest, files: Mapping[str, bytes | Path]) -> None:
    """Replace the installed version directory `final` as a new install would appear: the
    fresh copy is written in full beside it first, then two renames swap it in."""
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.repair.", dir=final.parent))
    try:
        fresh = write_version_dir(staging / final.name, manifest, files)
        broken = staging / "broken"
        os.rename(final, broken)
        try:
            os.rename(fresh, final)
        except OSError:
            os.rename(broken, final)  # as it was, rather than no copy at all
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _remove_installed(installed: _Installed) -> None:
    """A publish that fails after installing leaves the registry as it found it."""
    if installed.written:
        shutil.rmtree(installed.artifact.path, ignore_errors=True)


def user_cluster_warning(old: Artifact, new: Artifact) -> str | None:
    """One line when users of `old`'s clusters lose them in `new`: the scheme changed, the
    user features are gone, or cluster ids are gone (their users fall back to coarser ids)."""
    before, after = old.manifest.user_clusters, new.manifest.user_clusters
    if before is None:
        return None
    head = f"warning: {new.manifest.name} {new.manifest.version}"
    if after is None:
        return (
            f"{head} has no user features ({old.manifest.version} had): requests' users are ignored"
        )
    if before.scheme != after.scheme:
        return (
            f"{head} buckets user profiles by another scheme than {old.manifest.version}: "
            "users map to other cluster ids (overrides in Redis may name ids it lacks)"
        )
    kept = set(_cluster_ids(new))
    gone = [c for c in _cluster_ids(old) if c not in kept]
    if not gone:
        return None
    shown = ", ".join(gone[:5]) + (", ..." if len(gone) > 5 else "")
    return (
        f"{head} lacks {len(gone)} cluster id(s) {old.manifest.version} had ({shown}): their "
        "users fall back to coarser ids or the unknown row"
    )


def _cluster_ids(artifact: Artifact) -> list[str]:
    """The cluster rows of the version's table (not its per-field or combination rows)."""
    uc = artifact.manifest.user_clusters
    assert uc is not None
    ids = orjson.loads((artifact.path / uc.clusters_file).read_bytes())
    return [i for i in ids if isinstance(i, str) and not i.startswith(("field:", "combo:"))]


def _change_warnings(registry: Path, name: str, old: str | None, new: Artifact) -> list[str]:
    # None when `old` is no installed version (a blank or garbled CURRENT being set right).
    if old is None or old == new.manifest.version or old not in list_versions(registry, name):
        return []
    try:
        previous = load_version(Path(registry) / name / old)
    except ArtifactError:
        return []  # nothing to compare with; the old version was broken anyway
    cluster = user_cluster_warning(previous, new)
    found = feature_change_warnings(previous.manifest, new.manifest)
    return found if cluster is None else [*found, cluster]


def candidate_warning(
    registry: Path, name: str, current: str | None, candidate: Artifact
) -> str | None:
    """One line when `ltr experiment start` would refuse `candidate` against CURRENT."""
    if current not in list_versions(registry, name) or current == candidate.manifest.version:
        return None  # none (a blank or garbled CURRENT): nothing to compare with
    try:
        control = load_version(Path(registry) / name / current)
    except ArtifactError:
        return None  # start checks against whatever CURRENT is by then
    problems = compatibility_errors(control.manifest, candidate.manifest)
    if not problems:
        return None
    return (
        f"warning: {name} {candidate.manifest.version} cannot be compared with CURRENT "
        f"{current} in an experiment ({'; '.join(problems)}): `ltr experiment start` will "
        "refuse it"
    )


def experiment_pause_warning(registry: Path, name: str, current: str) -> str | None:
    """One line when CURRENT, now `current`, is not the running experiment's control: services
    stop serving the experiment (trainer.experiments.lifecycle.pause_reason)."""
    try:
        spec = read_experiment(registry, name)
    except ExperimentError as exc:
        return f"warning: {exc}"  # services refuse it: what publishing changes is moot
    if spec is None or spec.control == current:
        return None
    return (
        f"warning: experiment {spec.name} pauses: CURRENT is now {current}, its control is "
        f"{spec.control}; it resumes when CURRENT is {spec.control} again (or stop it: "
        f"ltr experiment stop --name {name})"
    )


def _push_to_redis(artifact: Artifact, redis_url: str, prefix: str) -> bool:
    """Write the version's user embeddings to Redis; False when it has none."""
    from trainer.redis_publish import push_embeddings

    uc = artifact.manifest.user_clusters
    if uc is None:
        return False
    clusters = orjson.loads(artifact.files[uc.clusters_file])
    embeddings = np.load(io.BytesIO(artifact.files[uc.embeddings_file]), allow_pickle=False)
    push_embeddings(redis_url, prefix, artifact.manifest, clusters, embeddings)
    return True


def _push_embeddings_or_warning(artifact: Artifact, redis_url: str, prefix: str) -> str | None:
    """Push the version's user embeddings; the operator's warning when that failed."""
    try:
        _push_to_redis(artifact, redis_url, prefix)
    except Exception as exc:
        return (
            f"warning: could not push the user embeddings to Redis ({exc}): services score "
            "with the version's own copy and answer degraded (embedding_missing_in_redis) "
            "until a publish or rollback pushes them"
        )
    return None


def push_model_item_set(artifact: Artifact, redis_url: str, prefix: str) -> str:
    """Make the item set version the model was trained with live in Redis: switch back to it
    when Redis still holds it complete, else push it from the snapshot the version carries
    (which also rewrites the item keys an incomplete version lost). Returns "set@version";
    ArtifactError when neither is possible."""
    import redis

    from trainer.features.item_table import table_from_version
    from trainer.features.redis_sets import PushError, push_item_set, read_meta, switch_version

    items = artifact.manifest.item_features
    assert items is not None
    label = f"{items.set}@{items.version}"
    try:
        with redis.Redis.from_url(redis_url, socket_timeout=30) as client:
            if items.version and read_meta(client, prefix, items.set, items.version) is not None:
                try:
                    switch_version(client, prefix, items.set, items.version)
                    return label
                except PushError:
                    # Incomplete (Redis evicted or lost keys): the push below repairs it.
                    if not items.has_snapshot:
                        raise
            if not items.has_snapshot:
                raise ArtifactError(
                    f"{artifact.path}: item set {label} is not in Redis and the version "
                    "carries no snapshot to push"
                )
            table = table_from_version(artifact.path)
            push_item_set(client, prefix, items.set, table, version=items.version)
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise ItemSetUnreachable(
            f"item set {label} could not be made live in Redis: {exc}", items.set, artifact.path
        ) from None
    except (redis.RedisError, PushError) as exc:
        raise ArtifactError(f"item set {label} could not be made live in Redis: {exc}") from None
    return label


def _announce(redis_url: str, prefix: str, name: str, version: str) -> None:
    from trainer.redis_publish import announce

    announce(redis_url, prefix, name, version)


def _try_announce(redis_url: str | None, prefix: str, name: str, version: str) -> bool:
    if not redis_url:
        return False
    try:
        _announce(redis_url, prefix, name, version)
    except Exception as exc:
        log.warning("could not announce on Redis (services will poll): %s", exc)
        return False
    return True


def publish(
    source: Path,
    registry: Path,
    *,
    name: str | None = None,
    keep: int = 5,
    redis_url: str | None = None,
    redis_prefix: str = "ltr:",
    as_candidate: bool = False,
) -> PublishResult:
    """Install `source` into the registry, push its embeddings, move CURRENT, announce.
    `as_candidate` stops before CURRENT: the version is installed for an online experiment."""
    source_artifact = load_version(source)  # verified before the lock: it can take a while
    with model_lock(registry, name or source_artifact.manifest.name):
        return _publish_locked(
            source_artifact, registry, name, keep, redis_url, redis_prefix, as_candidate
        )


def _publish_locked(
    source: Artifact,
    registry: Path,
    name: str | None,
    keep: int,
    redis_url: str | None,
    redis_prefix: str,
    as_candidate: bool,
) -> PublishResult:
    installed = _install(source, registry, name)
    artifact = installed.artifact
    m = artifact.manifest
    previous = read_current(registry, m.name)
    item_set = None
    if redis_url and m.item_features is not None:
        # Unlike the embeddings, a failed push stops the deploy: the new model would otherwise
        # score with whatever set version Redis holds, not the one it was trained with. The
        # version this call installed goes too, so a refused publish leaves the registry as it
        # found it.
        try:
            item_set = push_model_item_set(artifact, redis_url, redis_prefix)
        except Exception:
            _remove_installed(installed)
            raise
    pushed = False
    warnings: list[str | None] = []
    if redis_url:
        # A Redis failure must not stop a deploy: services fall back to the artifact's copy.
        warnings.append(_push_embeddings_or_warning(artifact, redis_url, redis_prefix))
        pushed = warnings[-1] is None and artifact.manifest.user_clusters is not None
    announced = False
    if as_candidate:
        warnings.append(candidate_warning(registry, m.name, previous, artifact))
    else:
        warnings += _change_warnings(registry, m.name, previous, artifact)
        warnings.append(experiment_pause_warning(registry, m.name, m.version))
        warnings.append(_move_current(registry, installed, previous))
        announced = _try_announce(redis_url, redis_prefix, m.name, m.version)
    removed = prune_versions(registry, m.name, keep)
    not_pushed = None
    if not redis_url and m.item_features is not None:
        not_pushed = f"{m.item_features.set}@{m.item_features.version}"
    return PublishResult(
        m.name,
        m.version,
        previous,
        artifact.path,
        removed,
        pushed,
        item_set,
        not_pushed,
        announced,
        # The caller shows them (the CLI on stderr, nightly in its log).
        [w for w in warnings if w is not None],
        installed.repaired,
    )


def _move_current(registry: Path, installed: _Installed, previous: str | None) -> str | None:
    """Point CURRENT at the installed version. When that fails (a full disk), the version
    this publish installed is removed and the error says so; when only HISTORY could not be
    written after CURRENT moved, the publish took effect (HISTORY's reader counts a CURRENT
    it lacks as the newest entry) and the operator gets a warning."""
    m = installed.artifact.manifest
    try:
        set_current(registry, m.name, m.version)
    except OSError as exc:
        if read_current(registry, m.name) == m.version:
            return (
                f"warning: {registry / m.name}/HISTORY: could not record {m.version} "
                f"({exc.strerror or exc}); CURRENT moved to it (a rollback from it needs "
                f"--to VERSION)"
            )
        _remove_installed(installed)
        left = f"CURRENT stays {previous}"
        if installed.written:
            left = f"removed the version this publish installed, {left}"
        path = registry / m.name / CURRENT_FILE
        raise _located(exc, path, f"moving CURRENT to {m.version}", left) from exc
    return None


def rollback(
    registry: Path,
    name: str,
    *,
    redis_url: str | None = None,
    redis_prefix: str = "ltr:",
    to: str | None = None,
) -> tuple[str, str]:
    """Point CURRENT back at the version it named before (or `to`); returns (from, to)."""
    result = roll_back(registry, name, redis_url=redis_url, redis_prefix=redis_prefix, to=to)
    return result.previous, result.version


def roll_back(
    registry: Path,
    name: str,
    *,
    redis_url: str | None = None,
    redis_prefix: str = "ltr:",
    to: str | None = None,
) -> RollbackResult:
    """Point CURRENT back at the version it named before (trainer.retention.rollback_target),
    or at installed version `to`. Rolling back again goes further back."""
    model_dir = Path(registry) / name
    # Checked before the lock creates the directory.
    check_model_name(name)
    if not model_dir.is_dir() or (to is None and read_current(registry, name) is None):
        raise ArtifactError(f"{model_dir}: no CURRENT version to roll back from")
    with model_lock(registry, name):
        current = read_current(registry, name)
        # A hand edit, a disk fault: `--to` points CURRENT at an installed version again.
        if to is None and (current is None or not (model_dir / current).is_dir()):
            named = "no version" if current is None else f"{current!r}, no installed version"
            raise ArtifactError(
                f"{model_dir / CURRENT_FILE} names {named}: point it at one with --rollback "
                f"--to VERSION (installed, newest first: {_newest_first(model_dir)})"
            )
        target = rollback_target(registry, name) if to is None else _installed_target(model_dir, to)
        if target is None:
            installed = set(list_versions(registry, name))
            pruned = [
                v for v in read_history(registry, name) if v != current and v not in installed
            ]
            gone = (
                f" (HISTORY's {', '.join(pruned[-3:])} {'was' if len(pruned) == 1 else 'were'} "
                "removed by --keep; publish one again to go back to it)"
                if pruned
                else ""
            )
            raise ArtifactError(f"{model_dir}: no version before {current} to roll back to{gone}")
        if target == current:
            raise ArtifactError(f"{model_dir}: CURRENT is {current} already")
        # Refuse to roll back onto a broken version; restore the item set it was trained with.
        artifact = load_version(model_dir / target)
        if redis_url and artifact.manifest.item_features is not None:
            push_model_item_set(artifact, redis_url, redis_prefix)
        pushed = False
        if redis_url:
            # Redis may have lost the older version's embeddings (eviction, a restart).
            warning = _push_embeddings_or_warning(artifact, redis_url, redis_prefix)
            if warning is not None:
                log.warning("%s", warning.removeprefix("warning: "))
            pushed = warning is None and artifact.manifest.user_clusters is not None
        try:
            # A named version HISTORY does not hold is a move forward from CURRENT, which a
            # later rollback returns to (as a rollback it would forget CURRENT: a trial saw
            # v01 --to v03, then a rollback to v02, the version rolled back from).
            back = to is None or target in read_history(registry, name)
            set_current(registry, name, target, rollback=back)
        except OSError as exc:
            left = f"CURRENT is {read_current(registry, name)}"
            path = model_dir / CURRENT_FILE
            raise _located(exc, path, f"moving CURRENT to {target}", left) from exc
        announced = _try_announce(redis_url, redis_prefix, name, target)
    return RollbackResult(name, current or "", target, pushed, announced)


def _installed_target(model_dir: Path, version: str) -> str:
    if version not in list_versions(model_dir.parent, model_dir.name):
        installed = _newest_first(model_dir)
        raise ArtifactError(
            f"{model_dir}: no installed version {version!r} (installed, newest first: {installed})"
        )
    return version


def _newest_first(model_dir: Path) -> str:
    return ", ".join(reversed(list_versions(model_dir.parent, model_dir.name))) or "none"


def rollback_warnings(registry: Path, name: str, old: str, new: str) -> list[str]:
    """The feature and user-cluster change warnings for a rollback from `old` to `new`."""
    return _change_warnings(registry, name, old, load_version(Path(registry) / name / new))
