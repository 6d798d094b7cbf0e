"""The in-process copy of a model's user-cluster embeddings, read from its artifact files.

`clusters.json` is a JSON list of cluster ids whose index is the row in `embeddings.npy`
(float32 [n_clusters, embedding_dim], loaded without pickle). The row of `scheme.unknown` is
the vector of last resort, so a table without it is refused.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass

import numpy as np

from app.artifacts.manifest import Manifest, UserClusters
from app.features.clusters import resolve_cluster


@dataclass(frozen=True)
class EmbeddingTable:
    user_clusters: UserClusters
    clusters: tuple[str, ...]
    vectors: np.ndarray  # float32 [n_clusters, embedding_dim], read-only
    index: dict[str, int]

    @property
    def dim(self) -> int:
        return self.user_clusters.embedding_dim

    @property
    def unknown(self) -> str:
        return self.user_clusters.scheme.unknown

    def resolve(self, cid: str) -> str:
        """The finest id along `cid`'s fallback chain that this table holds."""
        return resolve_cluster(self.user_clusters.scheme, cid, self.index)

    def vector(self, cid: str) -> np.ndarray:
        """float32 [embedding_dim] of `cid` (exact id), or the unknown-cluster row."""
        row = self.index.get(cid)
        return self.vectors[self.index[self.unknown] if row is None else row]

    @classmethod
    def from_files(cls, manifest: Manifest, files: dict[str, bytes]) -> EmbeddingTable:
        """Parse and check the two files; raises ValueError naming the file and the problem."""
        uc = manifest.user_clusters
        if uc is None:
            raise ValueError(f"model {manifest.name!r} has no user clusters")
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
        return cls(
            user_clusters=uc,
            clusters=tuple(clusters),
            vectors=vectors,
            index={c: i for i, c in enumerate(clusters)},
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
