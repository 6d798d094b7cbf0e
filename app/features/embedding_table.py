"""The in-process copy of a model's user-cluster embeddings, read from its artifact files.

`clusters.json` is a JSON list of cluster ids whose index is the row in `embeddings.npy`
(float32 [n_clusters, embedding_dim], loaded without pickle). The row of `scheme.unknown` is
the vector of last resort, so a table without it is refused.

With `field_embeddings` the list also holds per-field rows `field:<name>=<token>`: a user's
vector is their resolved cluster's row plus the rows of the tokens of their finest cluster id
(absent tokens add nothing). The coarse-to-fine cluster id keeps the field combinations that
are common enough (Grbovic & Cheng, KDD 2018); the field rows keep what dropping trailing
tokens throws away, whatever the field order.

With `combination_buckets` the list also holds rows `combo:<bucket>`: the user's vector adds the
row of every hashed combination of their field tokens the table holds
(app.features.field_combinations), for tastes that no single field carries.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from app.artifacts.manifest import ClusterScheme, Manifest, UserClusters
from app.features.clusters import resolve_cluster
from app.features.field_combinations import combination_buckets, parse_combination_row_key

FIELD_ROW_PREFIX = "field:"
EXTRA_VECTORS_CACHED = 16384
# A cluster vector read from Redis may be at most this many times larger in magnitude than the
# largest value of the version's own table (taken as at least 1.0). Redis holds the same
# version's rows (`ltr publish --redis-url` pushes the artifact's), so values an order of
# magnitude past anything training produced are corrupt; the headroom spares a row refreshed
# by other means. The network feeds the vector to its first layer unscaled (the features are
# standardised, the embedding is not), so 1e30 swamps every feature and 3e38 overflows
# float32: every score alike, or NaN.
REDIS_MAGNITUDE_HEADROOM = 16.0


def field_key(field_name: str, token: str) -> str:
    """The table key of one profile field's token: `field:country=US`."""
    return f"{FIELD_ROW_PREFIX}{field_name}={token}"


def field_keys(scheme: ClusterScheme, cid: str) -> list[str]:
    """The field keys of a cluster id's tokens, in field order (`US_a2` → country and age
    keys); none for the unknown id. A coarser id gives the keys of its leading fields only."""
    if cid == scheme.unknown or not cid:
        return []
    parts = cid.split(scheme.separator)
    return [field_key(f.name, t) for f, t in zip(scheme.fields, parts, strict=False)]


@dataclass(frozen=True)
class EmbeddingTable:
    user_clusters: UserClusters
    clusters: tuple[str, ...]
    vectors: np.ndarray  # float32 [n_rows, embedding_dim], read-only
    index: dict[str, int]  # cluster id → row
    field_index: dict[str, int] = field(default_factory=dict)  # field key → row
    combination_index: dict[int, int] = field(default_factory=dict)  # bucket → row
    # raw cluster id → the sum of its field and combination rows (per request: one add)
    _extra_vectors: dict[str, np.ndarray] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @property
    def dim(self) -> int:
        return self.user_clusters.embedding_dim

    @property
    def unknown(self) -> str:
        return self.user_clusters.scheme.unknown

    @cached_property
    def redis_bound(self) -> float:
        """The largest magnitude a Redis copy of a cluster row may hold (see
        REDIS_MAGNITUDE_HEADROOM)."""
        largest = float(np.max(np.abs(self.vectors))) if self.vectors.size else 0.0
        return REDIS_MAGNITUDE_HEADROOM * max(largest, 1.0)

    def resolve(self, cid: str) -> str:
        """The finest id along `cid`'s fallback chain that this table holds."""
        return resolve_cluster(self.user_clusters.scheme, cid, self.index)

    def vector(self, cid: str) -> np.ndarray:
        """float32 [embedding_dim] of `cid` (exact id), or the unknown-cluster row."""
        row = self.index.get(cid)
        return self.vectors[self.index[self.unknown] if row is None else row]

    def extra_rows(self, raw_cid: str) -> list[int]:
        """The field rows, then the combination rows, that `raw_cid`'s tokens have in this
        table (the training inputs' columns after the cluster row, absent ones left out)."""
        if not self.field_index:
            return []
        uc = self.user_clusters
        keys = field_keys(uc.scheme, raw_cid)
        rows = [self.field_index[k] for k in keys if k in self.field_index]
        if self.combination_index:
            buckets = combination_buckets(keys, uc.combination_max_fields, uc.combination_buckets)
            rows += [self.combination_index[b] for b in buckets if b in self.combination_index]
        return rows

    def user_vector(self, cluster_vector: np.ndarray, raw_cid: str) -> np.ndarray:
        """float32 [embedding_dim]: the resolved cluster's vector (from Redis or this table)
        plus the field and combination rows of `raw_cid`, the user's finest id before any
        fallback."""
        extra = self._extra_vectors.get(raw_cid)
        if extra is None:
            rows = self.extra_rows(raw_cid)
            if not rows:
                return cluster_vector
            # Row after row, in column order: the order the trainer's check adds them in.
            extra = np.add.reduce(self.vectors[rows], axis=0, dtype=np.float32)
            extra.setflags(write=False)
            if len(self._extra_vectors) >= EXTRA_VECTORS_CACHED:
                self._extra_vectors.clear()  # ids come from clients: the cache stays bounded
            self._extra_vectors[raw_cid] = extra
        total = np.add(cluster_vector, extra, dtype=np.float32)
        total.setflags(write=False)
        return total

    @classmethod
    def from_files(cls, manifest: Manifest, files: dict[str, bytes]) -> EmbeddingTable:
        """Parse and check the two files; raises ValueError naming the file and the problem."""
        uc = manifest.user_clusters
        if uc is None:
            raise ValueError(f"model {manifest.name!r} has no user clusters")
        return cls.from_user_clusters(uc, files)

    @classmethod
    def from_user_clusters(cls, uc: UserClusters, files: dict[str, bytes]) -> EmbeddingTable:
        """As `from_files`, for the manifest's `user_clusters` settings."""
        clusters = _read_clusters(uc.clusters_file, files)
        vectors = _read_vectors(uc.embeddings_file, files)
        where = f"{uc.embeddings_file}"
        if vectors.shape != (len(clusters), uc.embedding_dim):
            raise ValueError(
                f"{where}: shape {vectors.shape}, expected ({len(clusters)}, {uc.embedding_dim}) "
                f"= (clusters in {uc.clusters_file}, manifest embedding_dim)"
            )
        if not np.all(np.isfinite(vectors)):
            raise ValueError(f"{where}: holds NaN or infinite values")
        if uc.scheme.unknown not in clusters:
            raise ValueError(
                f"{uc.clusters_file}: no row for the unknown cluster {uc.scheme.unknown!r}"
            )
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        vectors.setflags(write=False)
        index = {c: i for i, c in enumerate(clusters)}
        fields: dict[str, int] = {}
        combinations: dict[int, int] = {}
        if uc.field_embeddings:
            fields = {c: i for c, i in index.items() if c.startswith(FIELD_ROW_PREFIX)}
            index = {c: i for c, i in index.items() if c not in fields}
        if uc.combination_buckets:
            for key, row in list(index.items()):
                bucket = parse_combination_row_key(key, uc.combination_buckets)
                if bucket is not None:
                    combinations[bucket] = row
                    del index[key]
        return cls(
            user_clusters=uc,
            clusters=tuple(clusters),
            vectors=vectors,
            index=index,
            field_index=fields,
            combination_index=combinations,
        )


def _read_clusters(name: str, files: dict[str, bytes]) -> list[str]:
    if name not in files:
        raise ValueError(f"{name}: missing from the artifact")
    try:
        clusters = json.loads(files[name])
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{name}: not valid JSON ({exc})") from None
    if not isinstance(clusters, list) or not all(isinstance(c, str) and c for c in clusters):
        raise ValueError(f"{name}: must be a JSON list of non-empty strings")
    if len(set(clusters)) != len(clusters):
        raise ValueError(f"{name}: cluster ids must be unique")
    return clusters


def _read_vectors(name: str, files: dict[str, bytes]) -> np.ndarray:
    if name not in files:
        raise ValueError(f"{name}: missing from the artifact")
    try:
        array = np.load(io.BytesIO(files[name]), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise ValueError(f"{name}: not a readable .npy array ({exc})") from None
    if not isinstance(array, np.ndarray):
        raise ValueError(f"{name}: not a single .npy array")
    # Byte order may differ from the machine's; the width and kind may not.
    if array.dtype.kind != "f" or array.dtype.itemsize != 4:
        raise ValueError(f"{name}: dtype {array.dtype}, expected float32")
    if array.ndim != 2:
        raise ValueError(f"{name}: {array.ndim}-D array, expected [n_clusters, embedding_dim]")
    return array
