"""Publishing a verified version into a registry, keeping the last N, and rolling back.

Order matters for the running services: the version directory appears whole (rename), its
embeddings reach Redis, and only then does CURRENT move and the announcement go out, so a
service that reloads finds everything it needs.
"""

from __future__ import annotations

import io
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

from app.artifacts.store import (
    Artifact,
    ArtifactError,
    list_versions,
    load_version,
    read_current,
    set_current,
    write_version_dir,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PublishResult:
    name: str
    version: str
    previous: str | None
    path: Path
    removed: list[str]
    redis_pushed: bool
    item_set: str | None = None  # "set@version" made live in Redis before CURRENT moved
    # "set@version" the model was trained with but, without a Redis URL, not pushed: services
    # serve it from the version's in-process snapshot until it is pushed.
    item_set_not_pushed: str | None = None


def install_version(source: Path, registry: Path, name: str | None = None) -> Artifact:
    """Copy a verified version directory into `<registry>/<name>/<version>` atomically."""
    artifact = load_version(source)
    manifest = artifact.manifest
    if name is not None and name != manifest.name:
        manifest = manifest.model_copy(update={"name": name})
    final = Path(registry) / manifest.name / manifest.version
    if final.exists():
        existing = load_version(final)
        if existing.manifest.files != artifact.manifest.files:
            raise ArtifactError(f"{final} already exists with different contents")
        return existing
    write_version_dir(final, manifest, artifact.all_files())
    return load_version(final)


def _push_to_redis(artifact: Artifact, redis_url: str, prefix: str) -> None:
    from trainer.redis_publish import push_embeddings

    uc = artifact.manifest.user_clusters
    if uc is None:
        return
    clusters = orjson.loads(artifact.files[uc.clusters_file])
    embeddings = np.load(io.BytesIO(artifact.files[uc.embeddings_file]), allow_pickle=False)
    push_embeddings(redis_url, prefix, artifact.manifest, clusters, embeddings)


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
    except (redis.RedisError, PushError) as exc:
        raise ArtifactError(f"item set {label} could not be made live in Redis: {exc}") from None
    return label


def _announce(redis_url: str, prefix: str, name: str, version: str) -> None:
    from trainer.redis_publish import announce

    announce(redis_url, prefix, name, version)


def prune_versions(registry: Path, name: str, keep: int) -> list[str]:
    """Delete the oldest versions beyond `keep`, never CURRENT or the one before it."""
    if keep < 1:
        raise ValueError("keep must be at least 1")
    versions = list_versions(registry, name)
    current = read_current(registry, name)
    protected = {current}
    if current in versions:
        idx = versions.index(current)
        if idx > 0:
            protected.add(versions[idx - 1])
    removable = [v for v in versions[: max(len(versions) - keep, 0)] if v not in protected]
    for version in removable:
        shutil.rmtree(Path(registry) / name / version)
    return removable


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
    artifact = install_version(source, registry, name)
    m = artifact.manifest
    previous = read_current(registry, m.name)
    item_set = None
    if redis_url and m.item_features is not None:
        # Unlike the embeddings, a failed push stops the deploy: the new model would otherwise
        # score with whatever set version Redis holds, not the one it was trained with.
        item_set = push_model_item_set(artifact, redis_url, redis_prefix)
    pushed = False
    if redis_url:
        # A Redis failure must not stop a deploy: services fall back to the artifact's copy.
        try:
            _push_to_redis(artifact, redis_url, redis_prefix)
            pushed = True
        except Exception as exc:
            log.warning("could not push embeddings to Redis: %s", exc)
    if not as_candidate:
        set_current(registry, m.name, m.version)
    if redis_url and not as_candidate:
        try:
            _announce(redis_url, redis_prefix, m.name, m.version)
        except Exception as exc:
            log.warning("could not announce on Redis (services will poll): %s", exc)
    removed = prune_versions(registry, m.name, keep)
    not_pushed = None
    if not redis_url and m.item_features is not None:
        not_pushed = f"{m.item_features.set}@{m.item_features.version}"
    return PublishResult(
        m.name, m.version, previous, artifact.path, removed, pushed, item_set, not_pushed
    )


def rollback(
    registry: Path, name: str, *, redis_url: str | None = None, redis_prefix: str = "ltr:"
) -> tuple[str, str]:
    """Point CURRENT at the version before it; returns (from, to)."""
    versions = list_versions(registry, name)
    current = read_current(registry, name)
    if current is None or current not in versions:
        raise ArtifactError(f"{Path(registry) / name}: no CURRENT version to roll back from")
    idx = versions.index(current)
    if idx == 0:
        raise ArtifactError(f"{Path(registry) / name}: {current} is the oldest version kept")
    target = versions[idx - 1]
    # Refuse to roll back onto a broken version; restore the item set it was trained with.
    artifact = load_version(Path(registry) / name / target)
    if redis_url and artifact.manifest.item_features is not None:
        push_model_item_set(artifact, redis_url, redis_prefix)
    set_current(registry, name, target)
    if redis_url:
        try:
            _announce(redis_url, redis_prefix, name, target)
        except Exception as exc:
            log.warning("could not announce on Redis (services will poll): %s", exc)
    return current, target
