"""A request's user → cluster id → embedding vector, with Redis as a soft dependency.

Chain: the `{prefix}user:{id}` override (Redis) or the profile's cluster id → the finest id
along its coarser chain that the model's table holds → that cluster's vector from Redis
`{prefix}emb:{model}:{version}`, else the in-process copy from the artifact. Whatever Redis
does, `resolve` answers within the deadline with a vector, and says `degraded` and why.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app import metrics as app_metrics
from app.artifacts.manifest import Manifest, UserClusters
from app.features.clusters import cluster_id
from app.features.embedding_table import EmbeddingTable
from app.features.redis_store import REDIS_BAD_VALUE, LookupTime, RedisStore
from app.settings import Settings

log = logging.getLogger(__name__)

NO_USER = "no_user"
UNKNOWN_CLUSTER = "unknown_cluster"
EMBEDDING_MISSING_IN_REDIS = "embedding_missing_in_redis"
EMBEDDING_MALFORMED_IN_REDIS = "embedding_malformed_in_redis"
EMBEDDING_TABLE_MISSING = "embedding_table_missing"
INTERNAL_ERROR = "user_features_error"
# Reasons that describe the request, not a fault: they neither set `degraded` nor count in
# `ltr_degraded_responses_total`.
INFORMATIONAL = frozenset({NO_USER, UNKNOWN_CLUSTER})
# Per model: the serving version, versions requests in flight may still use, refused loads.
VERSIONS_KEPT = 8


@dataclass(frozen=True)
class UserFeatures:
    vector: np.ndarray | None  # float32 [embedding_dim]; None when the model has no clusters
    cluster: str | None
    degraded: bool
    reasons: list[str] = field(default_factory=list)


class UserFeatureResolver:
    def __init__(
        self,
        settings: Settings,
        metrics: object | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        # `metrics`: anything with REDIS_HITS / REDIS_MISSES / REDIS_ERRORS counters (tests pass
        # their own); by default the service's Prometheus counters.
        source = metrics if metrics is not None else app_metrics
        counters = {
            "hits": getattr(source, "REDIS_HITS", None),
            "misses": getattr(source, "REDIS_MISSES", None),
            "errors": getattr(source, "REDIS_ERRORS", None),
        }
        # `clock` times the cache TTLs and the breaker's reset (not the per-request deadline).
        self.store = RedisStore(settings, counters=counters, clock=clock)
        self._tables: dict[str, OrderedDict[str, EmbeddingTable]] = {}
        self._lock = threading.Lock()  # the registry registers from a worker thread

    async def start(self) -> None:
        await self.store.start()

    async def close(self) -> None:
        await self.store.close()

    def register_model(self, manifest: Manifest, files: dict[str, bytes]) -> None:
        """Load the model's embedding table; ValueError (naming the file) when it is bad.

        Tables are kept per model, least recently used first out, at most VERSIONS_KEPT: every
        request touches the serving version's table, so refused or retired versions go first.
        """
        if manifest.user_clusters is None:
            return
        table = EmbeddingTable.from_files(manifest, files)
        with self._lock:
            versions = self._tables.setdefault(manifest.name, OrderedDict())
            versions[manifest.version] = table
            versions.move_to_end(manifest.version)
            while len(versions) > VERSIONS_KEPT:
                versions.popitem(last=False)

    def table(self, manifest: Manifest) -> EmbeddingTable | None:
        with self._lock:
            versions = self._tables.get(manifest.name)
            table = None if versions is None else versions.get(manifest.version)
            if table is not None and versions is not None:
                versions.move_to_end(manifest.version)
            return table

    async def resolve(
        self,
        manifest: Manifest,
        user: Mapping[str, Any] | None,
        lookup: LookupTime | None = None,
    ) -> UserFeatures:
        """The user's cluster and vector; never raises, never waits past the Redis deadline
        nor past the request's budget (`lookup`)."""
        uc = manifest.user_clusters
        if uc is None:
            return UserFeatures(None, None, False, [])
        table = self.table(manifest)
        if table is None:
            log.error("no embedding table registered for %s/%s", manifest.name, manifest.version)
            zeros = np.zeros(uc.embedding_dim, dtype=np.float32)
            return UserFeatures(zeros, uc.scheme.unknown, True, [EMBEDDING_TABLE_MISSING])
        try:
            return await self._resolve(manifest, uc, table, user, lookup)
        except Exception:  # the request must still be answered; the log keeps the bug visible
            log.exception("resolving user features for %s/%s", manifest.name, manifest.version)
            return UserFeatures(table.vector(table.unknown), table.unknown, True, [INTERNAL_ERROR])

    async def _resolve(
        self,
        manifest: Manifest,
        uc: UserClusters,
        table: EmbeddingTable,
        user: Mapping[str, Any] | None,
        lookup: LookupTime | None,
    ) -> UserFeatures:
        user_id, profile = _parse_user(user)
        reasons: list[str] = []
        redis_ok = self.store.enabled
        deadline = self.store.new_deadline(lookup)

        raw_cid: str | None = None
        if redis_ok and user_id is not None:
            fetch = await self.store.get_override(user_id, deadline)
            if fetch.error is not None:
                reasons.append(fetch.error)
                # One failure per request: the deadline is spent anyway. A bad value is not a
                # failure: Redis answered at once, and its embedding may still be good.
                redis_ok = fetch.error == REDIS_BAD_VALUE
            elif fetch.value:
                raw_cid = fetch.value.decode("utf-8", "replace").strip() or None
        if raw_cid is None:
            if profile is not None:
                # `{}` is a profile with every field missing (other / ax / px), as training
                # reads a user whose fields are all null; it got the `unknown` row.
                raw_cid = cluster_id(uc.scheme, profile)
            else:
                reasons.append(NO_USER)
                raw_cid = uc.scheme.unknown
        cluster = table.resolve(raw_cid)
        if cluster == table.unknown and raw_cid != table.unknown:
            reasons.append(UNKNOWN_CLUSTER)
        vector = table.vector(cluster)

        if redis_ok:
            fetch = await self.store.get_embedding(
                manifest.name, manifest.version, cluster, deadline, 4 * uc.embedding_dim
            )
            if fetch.error is not None:
                reasons.append(fetch.error)
            elif fetch.value is None:
                reasons.append(EMBEDDING_MISSING_IN_REDIS)
                key = f"{self.store.prefix}emb:{manifest.name}:{manifest.version}"
                self.store.faults.embeddings_missing(manifest.name, manifest.version, key)
            else:
                if not fetch.cached:
                    self.store.faults.embeddings_present(manifest.name, manifest.version)
                remote = _parse_vector(fetch.value, uc.embedding_dim, table.redis_bound)
                if remote is None:
                    reasons.append(EMBEDDING_MALFORMED_IN_REDIS)
                else:
                    vector = remote
        vector = table.user_vector(vector, raw_cid)  # plus per-field rows, when the model has them
        degraded = any(r not in INFORMATIONAL for r in reasons)
        return UserFeatures(vector, cluster, degraded, reasons)


def _parse_user(user: Mapping[str, Any] | None) -> tuple[str | None, dict[str, Any] | None]:
    """(user id or None, profile or None) from `{"id": ..., "profile": {...}}`; junk counts as
    absent."""
    if not isinstance(user, Mapping):
        return None, None
    raw_id = user.get("id")
    user_id = raw_id if isinstance(raw_id, str) and raw_id else None
    profile = user.get("profile")
    return user_id, dict(profile) if isinstance(profile, Mapping) else None


def _parse_vector(raw: bytes, dim: int, bound: float) -> np.ndarray | None:
    """float32 [dim] from little-endian bytes, or None when the length or values are wrong:
    non-finite, or beyond `bound` in magnitude (EmbeddingTable.redis_bound). A finite but huge
    value is as wrong as NaN: the network adds the vector to its first layer unscaled, so
    3e38 overflows to NaN scores and 1e30 swamps every feature (all scores alike)."""
    if len(raw) != dim * 4:
        return None
    vector = np.frombuffer(raw, dtype="<f4").astype(np.float32)
    # NaN compares False, so `not <=` also refuses NaN (and ±inf is past any finite bound).
    if not np.all(np.abs(vector) <= bound):
        return None
    vector.setflags(write=False)
    return vector
