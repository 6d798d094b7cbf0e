"""Item features by candidate id: Redis (shared by every worker and pod) or the in-process
snapshot the model version carries, with the snapshot as Redis's fallback.

Backend (`LTR_ITEM_STORE`): `redis` when `LTR_REDIS_URL` is set and the setting is `auto` or
`redis` (which refuses to start without it, app.settings), else `snapshot`. Whatever happens,
`fetch` answers within the Redis deadline and never raises: an item the store does not know
gets missing values (NaN, the model's missing-value rule) and is counted
(`item_features_missing`); Redis failing falls back to the snapshot when the model carries one,
else every item is missing; both are `degraded` with a reason.

Set versions are content hashes, so when Redis's live version is the snapshot's, a row Redis
lacks or holds malformed is one Redis lost (eviction under `maxmemory`, a partial restart):
it comes from the snapshot (`item_rows_lost_in_redis`, degraded), and the log names one such
key. A row key holding another type than a string (a list, a hash) is one of those: MGET
answers nil for it, as for an absent key, and telling them apart would cost a round trip.
Under another version an absent id is simply not in that catalog.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

import numpy as np
from prometheus_client import Counter, Histogram

from app.artifacts.manifest import ItemFeatureSet
from app.features.item_lookup import IdTokens
from app.features.item_redis import (
    ITEM_SET_MISSING,
    RedisItemBackend,
    decode_rows,
    item_keys,
    pointer_key,
)
from app.features.item_row_cache import ItemRowCache
from app.features.item_snapshot import ItemSnapshot, is_identity
from app.features.redis_store import LookupTime, RedisStore
from app.settings import Settings

log = logging.getLogger(__name__)

ITEM_FEATURES_MISSING = "item_features_missing"  # the store answered but lacks some items
ITEM_FEATURES_MALFORMED = "item_features_malformed"
ITEM_SET_MISMATCH = "item_set_mismatch"  # the live set lacks features the model needs
ITEM_SNAPSHOT_FALLBACK = "item_features_from_snapshot"
ITEM_ROWS_LOST = "item_rows_lost_in_redis"  # the snapshot's own version, with rows gone
ITEM_STORE_UNAVAILABLE = "item_features_unavailable"  # no Redis answer and no snapshot
ITEM_STORE_ERROR = "item_features_error"
# Reasons that are not an outage: the response is not `degraded` for them alone.
NOT_DEGRADED = frozenset({ITEM_FEATURES_MISSING})

FETCH_SECONDS = Histogram(
    "ltr_item_features_fetch_seconds",
    "Time to assemble one request's item features, by backend.",
    ["backend"],
    buckets=(0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1),
)
ITEMS_MISSING = Counter(
    "ltr_item_features_missing_total", "Candidates scored without their item features."
)
ROWS_LOST = Counter(
    "ltr_item_rows_lost_in_redis_total",
    "Item rows the live Redis version lacked or held malformed, served from the snapshot.",
)

Backend = Literal["redis", "snapshot", "none"]


@dataclass(frozen=True)
class ItemFeatures:
    matrix: np.ndarray  # float32 [n_candidates, n_item_features], model order; NaN = missing
    missing: int  # candidates scored without item features
    degraded: bool
    reasons: list[str] = field(default_factory=list)
    backend: Backend = "none"


class ItemFeatureStore:
    def __init__(self, settings: Settings, redis: RedisStore) -> None:
        use_redis = redis.enabled and settings.item_store != "snapshot"
        rows = ItemRowCache(settings.item_row_cache_rows)
        self.redis = RedisItemBackend(redis, rows) if use_redis else None
        self._store = redis

    @property
    def backend(self) -> Backend:
        return "redis" if self.redis is not None else "snapshot"

    def live_version(self, set_name: str) -> str | None:
        """The set's live Redis version as last read by this worker; None without Redis."""
        return None if self.redis is None else self.redis.live_version(set_name)

    async def fetch(
        self,
        items: ItemFeatureSet,
        names: Sequence[str],
        snapshot: ItemSnapshot | None,
        ids: Sequence[Any],
        lookup: LookupTime | None = None,
        tokens: IdTokens | None = None,
    ) -> ItemFeatures:
        """The model's item features `names` (in that order) of the candidates `ids`; Redis is
        not waited for past its deadline nor past the request's budget (`lookup`). `tokens`:
        the same ids as the body wrote them (the snapshot's compiled lookup reads those)."""
        started = time.perf_counter()
        try:
            result = await self._fetch(items, tuple(names), snapshot, ids, lookup, tokens)
        except Exception:  # the request must still be answered; the log keeps the bug visible
            log.exception("item features of set %s", items.set)
            result = _all_missing(len(ids), len(names), [ITEM_STORE_ERROR])
        FETCH_SECONDS.labels(result.backend).observe(time.perf_counter() - started)
        if result.missing:
            ITEMS_MISSING.inc(result.missing)
        return result

    async def _fetch(
        self,
        items: ItemFeatureSet,
        names: tuple[str, ...],
        snapshot: ItemSnapshot | None,
        ids: Sequence[Any],
        lookup: LookupTime | None,
        tokens: IdTokens | None,
    ) -> ItemFeatures:
        if self.redis is None:
            return _from_snapshot(snapshot, names, ids, [], tokens)
        deadline = self._store.new_deadline(lookup)
        got = await self.redis.fetch(items.set, ids, deadline)
        if got.error is not None or got.set_version is None or got.values is None:
            if got.error == ITEM_SET_MISSING:
                pointer = pointer_key(self._store.prefix, items.set)
                self._store.faults.set_missing(items.set, pointer)
            return _from_snapshot(snapshot, names, ids, [_store_reason(got.error)], tokens)
        self._store.faults.set_present(items.set)
        columns = column_index(got.set_version.names, names)
        if columns is None:
            return _from_snapshot(snapshot, names, ids, [ITEM_SET_MISMATCH], tokens)
        rows, found, malformed = decode_rows(got.values, len(got.set_version.names))
        matrix = rows if is_identity(columns, rows.shape[1]) else rows[:, columns]
        missing = len(ids) - int(found.sum())
        if not missing:  # the usual case, kept free of the checks below
            return ItemFeatures(matrix, 0, False, [], "redis")
        if malformed and missing == len(ids):
            # Not one row of the width the meta gives: the meta does not describe the rows
            # (names added or dropped), so none of this version can be read.
            return _from_snapshot(snapshot, names, ids, [ITEM_FEATURES_MALFORMED], tokens)
        if snapshot is not None and snapshot.version == got.set_version.version:
            result, lost = _refilled(matrix, found, malformed, snapshot, names, ids)
            if lost:  # the log names a key: lost, or holding another type (MGET says nil)
                key = item_keys(self._store.prefix, items.set, got.set_version.version, lost[:1])
                self._store.faults.rows_lost(items.set, len(lost), key[0])
            return result
        reasons = [ITEM_FEATURES_MISSING]
        if malformed:
            reasons.append(ITEM_FEATURES_MALFORMED)
        return ItemFeatures(matrix, missing, bool(malformed), reasons, "redis")


def _store_reason(error: str | None) -> str:
    """The response's reason for a failed Redis fetch: the set's own state as it is named
    (`item_set_missing_in_redis`), Redis's (`redis_timeout`, ...) as `item_store_...`."""
    error = error or "redis_unavailable"
    return error if error.startswith("item_") else f"item_store_{error}"


@lru_cache(maxsize=256)
def column_index(set_names: tuple[str, ...], wanted: tuple[str, ...]) -> np.ndarray | None:
    """int64 [len(wanted)]: where each wanted feature sits in the set; None if one is absent."""
    where = {name: j for j, name in enumerate(set_names)}
    if any(name not in where for name in wanted):
        return None
    columns = np.asarray([where[name] for name in wanted], dtype=np.int64)
    columns.setflags(write=False)
    return columns


def _from_snapshot(
    snapshot: ItemSnapshot | None,
    names: tuple[str, ...],
    ids: Sequence[Any],
    reasons: list[str],
    tokens: IdTokens | None = None,
) -> ItemFeatures:
    """`reasons` non-empty: the snapshot stands in for Redis (degraded)."""
    columns = None if snapshot is None else column_index(tuple(snapshot.names), names)
    if snapshot is None or columns is None:
        return _all_missing(len(ids), len(names), [*reasons, ITEM_STORE_UNAVAILABLE])
    matrix, found = snapshot.lookup(ids, columns, tokens)
    missing = len(ids) - int(found.sum())
    if reasons:
        reasons = [*reasons, ITEM_SNAPSHOT_FALLBACK]
    if missing:
        reasons = [*reasons, ITEM_FEATURES_MISSING]
    degraded = any(r not in NOT_DEGRADED for r in reasons)
    return ItemFeatures(matrix, missing, degraded, reasons, "snapshot")


def _refilled(
    matrix: np.ndarray,
    found: np.ndarray,
    malformed: int,
    snapshot: ItemSnapshot,
    names: tuple[str, ...],
    ids: Sequence[Any],
) -> tuple[ItemFeatures, list[Any]]:
    """Redis's rows of the snapshot's own version, the ones it lacks (`found` False) taken
    from the snapshot where it has them: those Redis lost (their ids come back too)."""
    holes = np.flatnonzero(~found)
    columns = column_index(tuple(snapshot.names), names)
    lost = 0
    lost_ids: list[Any] = []
    if columns is not None:
        values, known = snapshot.lookup([ids[j] for j in holes.tolist()], columns)
        lost = int(known.sum())
        if lost:
            lost_ids = [ids[j] for j in holes[known].tolist()]
            if not matrix.flags.writeable:  # decode_rows may hand out Redis's buffer
                matrix = matrix.copy()
            matrix[holes[known]] = values[known]
    missing = len(holes) - lost
    reasons = [ITEM_ROWS_LOST, ITEM_SNAPSHOT_FALLBACK] if lost else []
    if malformed:
        reasons.append(ITEM_FEATURES_MALFORMED)
    if missing:
        reasons.append(ITEM_FEATURES_MISSING)
    if lost:
        ROWS_LOST.inc(lost)
    return ItemFeatures(matrix, missing, bool(lost or malformed), reasons, "redis"), lost_ids


def _all_missing(n: int, width: int, reasons: list[str]) -> ItemFeatures:
    matrix = np.full((n, width), np.nan, dtype=np.float32)
    return ItemFeatures(matrix, n, True, reasons, "none")
