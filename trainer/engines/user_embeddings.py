"""User-cluster embeddings for tree models: learn the table with a network (or reuse the one
of an existing version), append each list's user vector to its documents' features, and carry
the table in the tree version so that the service resolves the user per request exactly as for
networks (manifest `user_clusters.input = "features"`)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from app.artifacts.manifest import UserClusters
from app.artifacts.store import ArtifactError, load_version
from app.features.embedding_table import EmbeddingTable
from trainer.data.dataset import RankingDataset
from trainer.dnn.options import MAX_LAYER_WIDTH, combinations_need_fields
from trainer.dnn.user_clusters import (
    EMBEDDING_FEATURE_PREFIX,
    ClusterConfigError,
    check_profile_fields,
    load_cluster_scheme,
    user_vectors,
)
from trainer.dnn.user_profiles import read_profiles

# The keys of `ltr train` (flags or params TOML) that configure user features.
USER_FEATURE_KEYS = (
    "user_profiles",
    "cluster_config",
    "embedding_dim",
    "min_cluster_count",
    "field_embeddings",
    "combination_buckets",
    "combination_max_fields",
    "user_embeddings_from",
)


@dataclass(frozen=True)
class TreeUserTable:
    """The user table a tree version carries: its manifest entry, its files (clusters.json,
    embeddings.npy) and the record of how it was made (manifest `training`)."""

    clusters: UserClusters
    files: dict[str, bytes]
    training: dict[str, Any]


class TreeUserOptions(BaseModel):
    """User features of a tree model (`ltr train --engine native|lightgbm ...`)."""

    model_config = ConfigDict(extra="forbid")

    user_profiles: Path | None = None
    cluster_config: Path | None = None
    embedding_dim: int = Field(32, ge=1, le=MAX_LAYER_WIDTH)
    min_cluster_count: int = Field(20, ge=1)
    field_embeddings: bool = True
    combination_buckets: int = Field(65536, ge=0)
    combination_max_fields: int = Field(3, ge=2)
    # A version directory with user clusters whose table is reused instead of learning one.
    user_embeddings_from: Path | None = None

    _combinations_need_fields = field_validator("combination_buckets")(combinations_need_fields)

    @property
    def enabled(self) -> bool:
        return any(
            v is not None
            for v in (self.user_profiles, self.cluster_config, self.user_embeddings_from)
        )


def user_table(
    train: RankingDataset,
    valid: RankingDataset | None,
    options: TreeUserOptions,
    *,
    seed: int = 0,
    threads: int = 0,
    dnn_params: dict[str, Any] | None = None,
) -> tuple[UserClusters, dict[str, bytes], dict[str, Any]]:
    """(the tree manifest's user_clusters, the table's files, what to record in `training`).

    With `user_embeddings_from`, that version's table (and scheme) as they are; otherwise a
    LambdaDNN with user clusters is trained on the same data and its learned table is taken.
    """
    if options.user_profiles is None:
        raise ClusterConfigError("user features need --user-profiles (the user_id → profile table)")
    if options.user_embeddings_from is not None:
        source = Path(options.user_embeddings_from)
        artifact = load_version(source)
        uc = artifact.manifest.user_clusters
        if uc is None:
            raise ClusterConfigError(f"{source}: this version has no user-cluster embeddings")
        if options.cluster_config is not None:
            scheme = load_cluster_scheme(options.cluster_config)
            if scheme != uc.scheme:
                raise ClusterConfigError(
                    f"{options.cluster_config}: differs from the scheme of {source}; "
                    "leave --cluster-config out to reuse that version's scheme"
                )
        files = {uc.clusters_file: artifact.files[uc.clusters_file]}
        files[uc.embeddings_file] = artifact.files[uc.embeddings_file]
        reused = {"user_embeddings_from": f"{artifact.manifest.name}/{artifact.manifest.version}"}
        return uc.model_copy(update={"input": "features"}), files, reused
    if options.cluster_config is None:
        raise ClusterConfigError(
            "user features need --cluster-config (or --user-embeddings-from a version)"
        )
    try:
        from trainer.dnn.options import DNNOptions
        from trainer.engines.dnn_model import train_dnn_model
    except ImportError as exc:
        raise ClusterConfigError(
            "learning user embeddings for a tree model needs the dnn extra "
            f"(pip install 'ltr-rerank[dnn]'), or pass --user-embeddings-from ({exc})"
        ) from None
    try:
        dnn = DNNOptions(
            **(dnn_params or {}),
            seed=seed,
            threads=threads,
            user_profiles=options.user_profiles,
            cluster_config=options.cluster_config,
            embedding_dim=options.embedding_dim,
            min_cluster_count=options.min_cluster_count,
            field_embeddings=options.field_embeddings,
            # Without field rows the default buckets mean none (an explicit count was refused
            # when the options were read).
            combination_buckets=options.combination_buckets if options.field_embeddings else 0,
            combination_max_fields=options.combination_max_fields,
        )
    except ValidationError as exc:  # a network flag (--hidden, --epochs...) out of bounds
        first = exc.errors()[0]
        flag = "--" + str(first["loc"][0]).replace("_", "-") if first["loc"] else "a flag"
        raise ClusterConfigError(
            f"{flag}: {first['msg']} (in the network that learns the user table)"
        ) from None
    with tempfile.TemporaryDirectory() as tmp:
        path = train_dnn_model(train, valid, dnn, Path(tmp) / "embeddings" / "v1").model_dir
        artifact = load_version(path)
    uc = artifact.manifest.user_clusters
    if uc is None:  # train_dnn_model always writes them with these options
        raise ArtifactError(f"{path}: the embedding network wrote no user clusters")
    files = {uc.clusters_file: artifact.files[uc.clusters_file]}
    files[uc.embeddings_file] = artifact.files[uc.embeddings_file]
    record: dict[str, Any] = {
        "user_embeddings": "learned by a LambdaDNN on the same data",
        "user_embedding_network": artifact.manifest.training.get("params"),
        "user_embedding_best_epoch": artifact.manifest.training.get("best_epoch"),
    }
    return uc.model_copy(update={"input": "features"}), files, record


def with_user_vectors(
    data: RankingDataset,
    user_clusters: UserClusters,
    files: dict[str, bytes],
    profiles_path: Path,
) -> RankingDataset:
    """`data` with each list's user vector (as the service computes it) appended to every
    document: columns `user_emb_0..D-1`."""
    if data.user_ids is None:
        raise ClusterConfigError(
            f"{data.source or 'the data'}: user features need the user of every query list "
            "(Parquet column user_id or a .user side file)"
        )
    table = EmbeddingTable.from_user_clusters(user_clusters, files)
    profiles = read_profiles(profiles_path)
    check_profile_fields(user_clusters.scheme, profiles, "the user table's scheme", profiles_path)
    vectors = user_vectors(table, profiles, list(data.user_ids))
    per_doc = np.repeat(vectors, data.group_sizes, axis=0)
    names = [f"{EMBEDDING_FEATURE_PREFIX}{i}" for i in range(table.dim)]
    clash = sorted(set(names) & set(data.names()))
    if clash:
        raise ClusterConfigError(f"{data.source}: already has a feature named {clash[0]!r}")
    return data.with_columns(per_doc, names)
