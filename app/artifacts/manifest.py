"""`manifest.json`: what a model version is, what it expects, and the sha256 of every file."""

from __future__ import annotations

import datetime as dt
import secrets
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


def new_version_id(now: dt.datetime | None = None) -> str:
    """A version id that sorts by creation time: `20261122T061500123456Z-1a2b3c`."""
    now = now or dt.datetime.now(dt.UTC)
    return now.strftime("%Y%m%dT%H%M%S%fZ") + "-" + secrets.token_hex(3)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MissingValueRule(_Strict):
    """How a missing feature value (absent name, null, NaN) reaches the model.

    `encoding` is always NaN on the wire to the scorer; `handled_by` says what the model does
    with it: trees send it down each split's default direction, networks impute inside the
    exported graph the training mean of a feature that had missing values in training and 0
    for one that never had (the manifest's `training.mean_imputed_features` lists the first).
    """

    encoding: Literal["nan"] = "nan"
    handled_by: Literal["tree_default_direction", "mean_imputation"]


class BucketedField(_Strict):
    """One profile field of the cluster scheme.

    categorical: the token is the value itself when in `values`, else `other`.
    numeric: the token is `prefix` + bucket index, bucket i holding edges[i-1] <= v < edges[i]
    (so there are len(edges) + 1 buckets); a missing or non-numeric value gives `prefix` + `x`.
    """

    name: str
    kind: Literal["categorical", "numeric"]
    prefix: str = ""
    values: list[str] = Field(default_factory=list)
    edges: list[float] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check(self) -> BucketedField:
        if self.kind == "numeric":
            if not self.prefix:
                raise ValueError(f"numeric field {self.name!r} needs a prefix")
            if any(b <= a for a, b in zip(self.edges, self.edges[1:], strict=False)):
                raise ValueError(f"edges of {self.name!r} must increase")
        return self


class ClusterScheme(_Strict):
    """Profile → cluster id such as `US_lt1_pn3` (after Grbovic & Cheng, KDD 2018).

    A cluster id not in the embedding table falls back to coarser ids by dropping trailing
    tokens (`US_lt1_pn3` → `US_lt1` → `US`), then to `unknown`.
    """

    fields: list[BucketedField]
    # Cluster ids are split on it (coarser ids, per-field rows): it cannot be empty.
    separator: str = Field("_", min_length=1)
    unknown: str = Field("unknown", min_length=1)


class UserClusters(_Strict):
    scheme: ClusterScheme
    embedding_dim: int = Field(gt=0)
    clusters_file: str = "clusters.json"  # JSON list of cluster ids; index = row in embeddings
    embeddings_file: str = "embeddings.npy"  # float32 [n_clusters, embedding_dim]
    # "features": the embedding is appended to each candidate's features (trees; the names are
    # the last `embedding_dim` entries of feature_names). "onnx_input": second ONNX input `user`.
    input: Literal["features", "onnx_input"] = "features"
    # True: clusters_file also lists per-field rows `field:<name>=<token>` (after the cluster
    # ids), and a user's vector is their cluster's row plus the row of every token of their
    # finest cluster id that the table holds, so a user whose full cluster is rare still
    # contributes every field (app.features.embedding_table.EmbeddingTable.user_vector).
    field_embeddings: bool = False
    # > 0: clusters_file also lists rows `combo:<bucket>` (after the field rows), and the user's
    # vector also adds the row of every combination of 2..combination_max_fields of their field
    # tokens, hashed into `combination_buckets` buckets, that the table holds
    # (app.features.field_combinations). Needs field_embeddings.
    combination_buckets: int = Field(0, ge=0)
    combination_max_fields: int = Field(3, ge=2)

    @model_validator(mode="after")
    def _check_combinations(self) -> UserClusters:
        if self.combination_buckets and not self.field_embeddings:
            raise ValueError("combination_buckets needs field_embeddings")
        return self


FeatureSource = Literal["candidate", "query", "item", "user"]
SOURCES: tuple[FeatureSource, ...] = ("candidate", "query", "item", "user")


class ItemFeatureSet(_Strict):
    """Where a model's `item` features come from: an item feature set, looked up by candidate id.

    `names` is the set's column order (the packed float32 values in Redis and the columns of the
    in-process snapshot); the model's item features are a subset of it, in any order. `version`
    is the set version the model was trained with (pushed to Redis before the model serves).
    `matrix_file` / `ids_file`: the in-process snapshot the version carries, if any: float32
    [n_items, len(names)] and the sorted unique item ids (unicode) of its rows.
    """

    set: str = Field(pattern=NAME_PATTERN)
    version: str | None = Field(None, pattern=NAME_PATTERN)
    names: list[str] = Field(min_length=1)
    id_column: str = "doc_id"
    matrix_file: str | None = None
    ids_file: str | None = None

    @model_validator(mode="after")
    def _check(self) -> ItemFeatureSet:
        if len(set(self.names)) != len(self.names):
            raise ValueError("item feature set names must be unique")
        if (self.matrix_file is None) != (self.ids_file is None):
            raise ValueError("an item snapshot needs both matrix_file and ids_file")
        return self

    @property
    def has_snapshot(self) -> bool:
        return self.matrix_file is not None


class Manifest(_Strict):
    format_version: Literal[1] = 1
    name: str = Field(pattern=NAME_PATTERN)
    version: str = Field(pattern=NAME_PATTERN)
    kind: Literal["lambdamart", "lambdadnn"]
    created_at: dt.datetime
    feature_names: list[str] = Field(min_length=1)
    missing_value: MissingValueRule
    user_clusters: UserClusters | None = None
    # Feature name -> where its value comes from; a name not listed is `candidate` (sent with
    # each candidate), or `user` for the appended embedding columns. Old manifests: all candidate.
    feature_sources: dict[str, FeatureSource] = Field(default_factory=dict)
    item_features: ItemFeatureSet | None = None
    metrics: dict[str, Any] = Field(default_factory=dict)
    training: dict[str, Any] = Field(default_factory=dict)
    files: dict[str, str] = Field(default_factory=dict)  # file name -> sha256 hex

    @model_validator(mode="after")
    def _check(self) -> Manifest:
        if len(set(self.feature_names)) != len(self.feature_names):
            raise ValueError("feature_names must be unique")
        model_file = "model.json" if self.kind == "lambdamart" else "model.onnx"
        if self.files and model_file not in self.files:
            raise ValueError(f"a {self.kind} manifest must list {model_file} in files")
        for fname in self.files:
            if "/" in fname or fname.startswith("."):
                raise ValueError(f"file name {fname!r} must be a plain name")
        self._check_sources()
        return self

    def _check_sources(self) -> None:
        unknown = sorted(set(self.feature_sources) - set(self.feature_names))
        if unknown:
            raise ValueError(f"feature_sources names unknown features: {unknown[:5]}")
        embedding = set(self._embedding_names())
        for name, source in self.feature_sources.items():
            if (source == "user") != (name in embedding):
                raise ValueError(f"feature {name!r}: `user` is the source of exactly the embedding")
        items = [n for n, s in self.feature_sources.items() if s == "item"]
        if items and self.item_features is None:
            raise ValueError("item features need `item_features` (the set they come from)")
        if self.item_features is not None:
            if not items:
                raise ValueError("`item_features` is set but no feature has source `item`")
            absent = sorted(set(items) - set(self.item_features.names))
            if absent:
                raise ValueError(f"item features not in the item set's names: {absent[:5]}")

    def _embedding_names(self) -> list[str]:
        uc = self.user_clusters
        if uc is not None and uc.input == "features":
            return self.feature_names[-uc.embedding_dim :]
        return []

    def source(self, name: str) -> FeatureSource:
        """Where feature `name` comes from."""
        found = self.feature_sources.get(name)
        if found is not None:
            return found
        return "user" if name in self._embedding_names() else "candidate"

    def names_from(self, source: FeatureSource) -> list[str]:
        """The features of one source, in model column order."""
        return [n for n in self.feature_names if self.source(n) == source]

    @property
    def model_file(self) -> str:
        return "model.json" if self.kind == "lambdamart" else "model.onnx"

    @property
    def request_feature_names(self) -> list[str]:
        """The model's columns but the appended user-cluster embedding: what training data and
        the scorer's callers supply (candidate, query and item features alike)."""
        embedding = len(self._embedding_names())
        return self.feature_names[: len(self.feature_names) - embedding]

    @property
    def candidate_feature_names(self) -> list[str]:
        """What a client sends with each candidate (source `candidate`), in model order."""
        if not self.feature_sources:
            return self.request_feature_names
        return self.names_from("candidate")

    @property
    def has_sources(self) -> bool:
        """Whether any feature comes from elsewhere than the candidate (or the user embedding)."""
        return any(s in ("query", "item") for s in self.feature_sources.values())
