"""User-cluster embeddings (after Grbovic & Cheng, KDD 2018): each user's profile is bucketised
into a cluster id such as `US_lt1_pn3`; clusters with fewer than `min_count` training users fall
back to coarser ids (`US_lt1`, `US`) and then to `unknown`; the network learns one embedding row
per surviving id. The service resolves a request's user with the same fallback chain
(app.features.clusters.resolve_cluster), so training and serving agree.

With field embeddings the table also holds one row per profile-field token that at least
`min_count` training users share (`field:country=US`), and a user's vector is the sum of their
cluster's row and their tokens' rows (app.features.embedding_table.EmbeddingTable.user_vector):
a user whose full cluster is rare still contributes every field, whatever the field order.

With combination rows the table also holds one row per hash bucket (`combo:<bucket>`) that a
combination of 2..max_fields field tokens shared by at least `min_count` training users hits
(app.features.field_combinations); the user's vector adds the rows of their combinations too.
Field and combination keys are sorted, so these rows do not depend on the scheme's field order;
only the coarse-to-fine cluster id does."""

from __future__ import annotations

import dataclasses
import json
import math
import tomllib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from app.artifacts.manifest import BucketedField, ClusterScheme
from app.errors import LtrError
from app.features.clusters import (
    MAX_CLUSTER_ID_LENGTH,
    OTHER_TOKEN,
    cluster_id,
    coarser_ids,
    resolve_cluster,
)
from app.features.embedding_table import EmbeddingTable, field_keys
from app.features.field_combinations import (
    bucket_of,
    combination_buckets,
    combination_count,
    combination_keys,
    combination_row_key,
)
from trainer.data.dataset import RankingDataset
from trainer.toml_lines import at_key

EMBEDDING_FEATURE_PREFIX = "user_emb_"

# A key path of the scheme file → `file:line: fields.0.edges` (trainer.toml_lines.at_key).
KeyPlace = Callable[[Sequence[str | int]], str]


class ClusterConfigError(LtrError, ValueError):
    """A cluster-scheme config that cannot be used; the message names the file."""


def load_cluster_scheme(path: Path) -> ClusterScheme:
    """A TOML config: optional `separator` and `unknown`, and `[[fields]]` tables with `name`,
    `kind` ("categorical" with `values`, or "numeric" with `prefix` and increasing `edges`)."""
    path = Path(path)
    try:
        # utf-8-sig: an editor's byte-order mark would otherwise be a TOML syntax error.
        text = path.read_text(encoding="utf-8-sig")
        raw = tomllib.loads(text)
    except OSError as exc:
        raise ClusterConfigError(f"{path}: cannot read ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ClusterConfigError(f"{path}: not valid TOML ({exc})") from None
    where = partial(at_key, path, text)  # `file:line: fields.0.edges` for a key path
    try:
        scheme = ClusterScheme.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ClusterConfigError(f"{where(first['loc'])}: {first['msg']}") from None
    if not scheme.fields:
        raise ClusterConfigError(f"{where(('fields',))}: the scheme needs at least one field")
    _check_separator(scheme, where)
    _check_fields(scheme, where)
    return scheme


def _check_fields(scheme: ClusterScheme, where: KeyPlace) -> None:
    """What the scheme's own model lets through (a trial): NaN or infinite edges trained a
    whole epoch before the manifest refused them naming its own file; a field named twice
    made a level that carries nothing; a value listed twice, or `other` listed, which is
    the token of every value the list lacks (the two could not be told apart)."""
    seen: set[str] = set()
    for i, spec in enumerate(scheme.fields):
        if spec.name in seen:
            raise ClusterConfigError(
                f"{where(('fields', i, 'name'))}: field {spec.name!r} is already in the scheme"
            )
        seen.add(spec.name)
        _check_values(spec, i, where)
        for j, edge in enumerate(spec.edges):
            if not math.isfinite(edge):
                raise ClusterConfigError(
                    f"{where(('fields', i, 'edges', j))}: {edge} (field {spec.name!r}) is not "
                    "a finite number"
                )


def _check_values(spec: BucketedField, i: int, where: KeyPlace) -> None:
    listed: set[str] = set()
    for j, value in enumerate(spec.values):
        if value == OTHER_TOKEN:
            raise ClusterConfigError(
                f"{where(('fields', i, 'values', j))}: {value!r} (field {spec.name!r}) is the "
                "token of every value the list lacks, so it cannot be listed; leave it out "
                "(unlisted values become it)"
            )
        if value in listed:
            raise ClusterConfigError(
                f"{where(('fields', i, 'values', j))}: {value!r} (field {spec.name!r}) is "
                "listed twice"
            )
        listed.add(value)


def _check_separator(scheme: ClusterScheme, where: KeyPlace) -> None:
    """A listed value or a prefix holding the separator would split into two tokens: the id
    would fall back through a prefix that is no field's token, and its field keys would be
    off by one field (app.features.embedding_table.field_keys)."""
    sep = scheme.separator
    for i, spec in enumerate(scheme.fields):
        for value in spec.values:
            if sep in value:
                raise ClusterConfigError(
                    f"{where(('fields', i, 'values'))}: {value!r} (field {spec.name!r}) "
                    f"contains the separator {sep!r}; cluster ids are split on it, so a value "
                    "must not"
                )
        if sep in spec.prefix:
            raise ClusterConfigError(
                f"{where(('fields', i, 'prefix'))}: {spec.prefix!r} (field {spec.name!r}) "
                f"contains the separator {sep!r}; cluster ids are split on it, so a prefix "
                "must not"
            )


def check_profile_fields(
    scheme: ClusterScheme,
    profiles: Mapping[str, Mapping[str, Any]],
    scheme_source: object,
    profiles_source: object,
) -> None:
    """Raise ClusterConfigError naming the first scheme field that is not a column of the
    profile table: every user would get the same token for it (`other` or `x`), silently.
    A table without rows has no columns to check (every user is then `unknown`)."""
    if not profiles:
        return
    columns = next(iter(profiles.values())).keys()  # every row has every column
    for spec in scheme.fields:
        if spec.name not in columns:
            raise ClusterConfigError(
                f"{scheme_source}: field {spec.name!r} is not a column of the profile table "
                f"{profiles_source} (columns: {', '.join(sorted(columns)) or 'none'})"
            )


def fine_cluster_ids(
    scheme: ClusterScheme, profiles: Mapping[str, Mapping[str, Any]], users: Sequence[str]
) -> list[str]:
    """The finest cluster id of each user; a user without a profile row (or an empty one) gets
    `unknown`, exactly as the service resolves a request without a profile."""
    out = []
    for user in users:
        profile = profiles.get(user)
        out.append(cluster_id(scheme, profile) if profile else scheme.unknown)
    return out


def surviving_clusters(scheme: ClusterScheme, fine_ids: Sequence[str], min_count: int) -> list[str]:
    """The embedding table's ids: `unknown` first, then every id with at least `min_count`
    users, sorted.

    fine_ids: one per distinct training user. A coarser id counts every user under it, so a
    user keeps the finest id along its fallback chain that is common enough. Coarser ids that no
    user keeps stay in the table for new users at serving time (see `fill_untrained_rows`).
    """
    counts: Counter[str] = Counter()
    for fine in fine_ids:
        counts.update(coarser_ids(scheme, fine)[:-1])
    kept = {c for c, n in counts.items() if n >= min_count and c != scheme.unknown}
    return [scheme.unknown, *sorted(kept)]


def cluster_rows(
    scheme: ClusterScheme, clusters: Sequence[str], fine_ids: Sequence[str]
) -> np.ndarray:
    """int64 [n]: the embedding row of each fine id, resolved as the service resolves it."""
    index = {c: i for i, c in enumerate(clusters)}
    return np.array([index[resolve_cluster(scheme, f, index)] for f in fine_ids], dtype=np.int64)


def surviving_field_keys(
    scheme: ClusterScheme, fine_ids: Sequence[str], min_count: int
) -> list[str]:
    """The field rows' keys: every field token at least `min_count` distinct users share,
    sorted. fine_ids: one per distinct training user."""
    counts: Counter[str] = Counter()
    for fine in fine_ids:
        counts.update(field_keys(scheme, fine))
    return sorted(k for k, n in counts.items() if n >= min_count)


def field_rows(
    scheme: ClusterScheme, fields: Sequence[str], first_row: int, fine_ids: Sequence[str]
) -> np.ndarray:
    """int64 [n, n_fields]: the table row of each fine id's field tokens, -1 where the table
    has none. fields: the field keys, whose rows start at `first_row`."""
    index = {k: first_row + i for i, k in enumerate(fields)}
    out = np.full((len(fine_ids), len(scheme.fields)), -1, dtype=np.int64)
    for i, fine in enumerate(fine_ids):
        for j, key in enumerate(field_keys(scheme, fine)):
            out[i, j] = index.get(key, -1)
    return out


@dataclass(frozen=True)
class Combinations:
    """How field combinations are hashed: `buckets` buckets, 2..max_fields fields each."""

    buckets: int
    max_fields: int


def surviving_buckets(
    scheme: ClusterScheme, fine_ids: Sequence[str], min_count: int, combos: Combinations
) -> list[int]:
    """The combination rows' buckets: every bucket hit by a combination that at least
    `min_count` distinct users share, sorted. fine_ids: one per distinct training user."""
    counts: Counter[str] = Counter()
    for fine in fine_ids:
        counts.update(combination_keys(field_keys(scheme, fine), combos.max_fields))
    return sorted({bucket_of(k, combos.buckets) for k, n in counts.items() if n >= min_count})


def combination_rows(
    scheme: ClusterScheme,
    buckets: Sequence[int],
    first_row: int,
    fine_ids: Sequence[str],
    combos: Combinations,
) -> np.ndarray:
    """int64 [n, n_combinations]: the table row of each fine id's combinations (in
    `combination_keys` order), -1 where the bucket has no row or the id lacks the fields.
    buckets: the surviving buckets, whose rows start at `first_row`."""
    index = {b: first_row + i for i, b in enumerate(buckets)}
    width = combination_count(len(scheme.fields), combos.max_fields)
    out = np.full((len(fine_ids), width), -1, dtype=np.int64)
    for i, fine in enumerate(fine_ids):
        hashed = combination_buckets(field_keys(scheme, fine), combos.max_fields, combos.buckets)
        for j, bucket in enumerate(hashed):
            out[i, j] = index.get(bucket, -1)
    return out


@dataclass(frozen=True)
class UserClusterAssignment:
    """The embedding table of a training run and the rows of every query list's user.

    The table's rows: cluster ids (`clusters`), then field keys (`fields`), then combination
    buckets (`buckets`); a user's "extra" rows are their field rows then their combination rows
    (-1 where the table has none)."""

    scheme: ClusterScheme
    clusters: list[str]  # cluster rows of the table; clusters[0] == scheme.unknown
    train_rows: np.ndarray  # int64 [n_train_queries], the cluster row of each list's user
    user_counts: dict[str, int]  # training users per kept cluster
    fields: list[str] = field(default_factory=list)  # field rows' keys, after the clusters
    # int64 [n_train_queries, n_fields + n_combinations], -1 = none; None: clusters only
    train_extra_rows: np.ndarray | None = None
    # int64 [n_users, 1 + n_fields + n_combinations], each distinct training user's rows
    user_rows: np.ndarray | None = None
    combinations: Combinations | None = None
    buckets: list[int] = field(default_factory=list)  # combination rows' buckets, after fields
    # Kept row → training users whose finest id is longer than MAX_CLUSTER_ID_LENGTH (their
    # fallback starts at a shorter prefix), and the longest finest id's length.
    over_long: dict[str, int] = field(default_factory=dict)
    longest_id: int = 0

    @property
    def field_embeddings(self) -> bool:
        return self.train_extra_rows is not None

    @property
    def keys(self) -> list[str]:
        """`clusters.json`'s list: cluster ids, field keys, `combo:<bucket>`; index = row."""
        return [*self.clusters, *self.fields, *map(combination_row_key, self.buckets)]

    @property
    def shared_rows(self) -> int:
        """Rows after the cluster rows (field and combination rows): the same set of keys
        whatever the scheme's field order."""
        return len(self.fields) + len(self.buckets)

    def rows_for(
        self, profiles: Mapping[str, Mapping[str, Any]], user_ids: np.ndarray
    ) -> np.ndarray:
        """int64 [n_queries]: the rows for another dataset's query users (e.g. validation)."""
        users = [str(u) for u in user_ids]
        return cluster_rows(
            self.scheme, self.clusters, fine_cluster_ids(self.scheme, profiles, users)
        )

    def extra_rows(self, fine_ids: Sequence[str]) -> np.ndarray:
        """int64 [n, n_fields + n_combinations]: the field then combination rows of each fine
        id, -1 where the table has none."""
        first = len(self.clusters)
        out = field_rows(self.scheme, self.fields, first, fine_ids)
        if self.combinations is None:
            return out
        first += len(self.fields)
        combos = combination_rows(self.scheme, self.buckets, first, fine_ids, self.combinations)
        return np.concatenate([out, combos], axis=1)

    def inputs_for(
        self, profiles: Mapping[str, Mapping[str, Any]], user_ids: np.ndarray
    ) -> np.ndarray:
        """The network's user input for another dataset's query users (see `inputs`)."""
        fine = fine_cluster_ids(self.scheme, profiles, [str(u) for u in user_ids])
        rows = cluster_rows(self.scheme, self.clusters, fine)
        if not self.field_embeddings:
            return rows
        return self.inputs(rows, self.extra_rows(fine))

    def train_inputs(self) -> np.ndarray:
        return self.inputs(self.train_rows, self.train_extra_rows)

    def inputs(self, rows: np.ndarray, extra: np.ndarray | None) -> np.ndarray:
        """int64 [n] cluster rows, or [n, 1 + n_fields + n_combinations] with field (and
        combination) rows: the rows whose sum is each user's vector, an absent one pointing at
        the all-zero padding row len(keys) (trainer.dnn.models.ranker.Ranker)."""
        if extra is None:
            return rows
        pad = len(self.clusters) + self.shared_rows
        return np.concatenate([rows[:, None], np.where(extra < 0, pad, extra)], axis=1)

    def clusters_json(self) -> bytes:
        """`clusters.json`: the JSON list of table keys, index = embedding row."""
        return json.dumps(self.keys).encode()


def assign_user_clusters(
    scheme: ClusterScheme,
    profiles: Mapping[str, Mapping[str, Any]],
    train_user_ids: np.ndarray,
    min_count: int,
    field_embeddings: bool = False,
    combinations: Combinations | None = None,
) -> UserClusterAssignment:
    """Build the cluster table from the distinct users of the training lists and give each
    training list its row(s). train_user_ids: [n_train_queries]. `combinations` (hashed field
    combinations) needs `field_embeddings`."""
    if combinations is not None and not field_embeddings:
        raise ClusterConfigError("combination rows need field embeddings")
    users = [str(u) for u in train_user_ids]
    distinct = sorted(set(users))
    fine_of = dict(zip(distinct, fine_cluster_ids(scheme, profiles, distinct), strict=True))
    clusters = surviving_clusters(scheme, list(fine_of.values()), min_count)
    rows = cluster_rows(scheme, clusters, [fine_of[u] for u in users])
    user_rows = cluster_rows(scheme, clusters, list(fine_of.values()))
    per_row = np.bincount(user_rows, minlength=len(clusters))
    counts = {c: int(n) for c, n in zip(clusters, per_row, strict=True)}
    fine_users = list(fine_of.values())
    over_long = dict(
        Counter(
            clusters[row]
            for fine, row in zip(fine_users, user_rows, strict=True)
            if len(fine) > MAX_CLUSTER_ID_LENGTH
        )
    )
    longest = max(map(len, fine_users), default=0)
    if not field_embeddings:
        return UserClusterAssignment(
            scheme, clusters, rows, counts, over_long=over_long, longest_id=longest
        )
    assignment = UserClusterAssignment(
        scheme,
        clusters,
        rows,
        counts,
        surviving_field_keys(scheme, fine_users, min_count),
        combinations=combinations,
        buckets=(
            []
            if combinations is None
            else surviving_buckets(scheme, fine_users, min_count, combinations)
        ),
        over_long=over_long,
        longest_id=longest,
    )
    per_user = assignment.extra_rows(fine_users)  # [n_distinct, n_fields + n_combinations]
    position = {u: i for i, u in enumerate(distinct)}
    train_extra = per_user[np.array([position[u] for u in users], dtype=np.int64)]
    return dataclasses.replace(
        assignment,
        train_extra_rows=train_extra,
        user_rows=np.concatenate([user_rows[:, None], per_user], axis=1),
    )


# From this share of training users in `unknown` on, the user features are said to carry little.
FALLBACK_WARNING_SHARE = 0.5


def fallback_warning(assignment: UserClusterAssignment, min_count: int) -> str | None:
    """A warning when at least FALLBACK_WARNING_SHARE of the distinct training users have a
    row that tells them little apart: `unknown` (no profile row, or no coarser id with
    `min_count` users), or, without field rows, `unknown` or a coarser row than their own
    (with field rows a coarser cluster row is the design: the fields still count). None when
    the share is smaller, unless some users' finest ids are longer than MAX_CLUSTER_ID_LENGTH:
    that cause (their id can keep only its leading tokens) is named apart from a too-small
    group, whatever the share. Counts come from `assignment.user_counts` (users per kept row).
    """
    scheme = assignment.scheme
    total = sum(assignment.user_counts.values())
    if total == 0:
        return None
    unknown = assignment.user_counts.get(scheme.unknown, 0)
    sep, n_fields = scheme.separator, len(scheme.fields)
    full = sum(
        n
        for cid, n in assignment.user_counts.items()
        if cid != scheme.unknown and (not sep or cid.count(sep) >= n_fields - 1)
    )
    coarse = total - unknown - full
    vague = unknown if assignment.field_embeddings else unknown + coarse
    long_total = sum(assignment.over_long.values())
    too_long = (
        f"have a cluster id longer than the {MAX_CLUSTER_ID_LENGTH} characters an id may have "
        f"(up to {assignment.longest_id}), so its cluster row is at best its longest prefix "
        "within that length (trailing tokens dropped); shorten the profile values or use fewer "
        "fields"
    )
    if vague < FALLBACK_WARNING_SHARE * total:
        if not long_total:
            return None
        return f"user cluster ids cut short: {long_total} of the {total} training users {too_long}"
    # Users of a too-long id end in `unknown` or a coarser row whatever --min-cluster-count.
    long_vague = assignment.over_long.get(scheme.unknown, 0)
    if not assignment.field_embeddings:
        long_vague = long_total
    causes = [f"{long_vague} of them {too_long}"] if long_vague else []
    if vague > long_vague:
        causes.append(
            f"fewer than --min-cluster-count {min_count} training users share their cluster "
            "id, or they have no profile row; lower --min-cluster-count, or use fewer or "
            "coarser fields"
        )
    where = f"{scheme.unknown!r}" if assignment.field_embeddings else "a coarser row or unknown"
    fields = f", {len(assignment.fields)} field rows" if assignment.field_embeddings else ""
    return (
        f"user features carry little: {vague / total:.0%} of the {total} training users fell into "
        f"{where} ({unknown} in {scheme.unknown!r}, {coarse} in a coarser cluster row, {full} "
        f"keep their full cluster id{fields}): " + "; ".join(causes)
    )


def fill_untrained_rows(assignment: UserClusterAssignment, table: np.ndarray) -> np.ndarray:
    """Cluster rows no training user reached never trained: each becomes the user-weighted mean
    of the trained rows under it, i.e. its average user. For `unknown` (mostly requests without
    a user, which get no field rows) that is the mean of all training users' whole vectors.

    table: float32 [n_keys, embedding_dim] (cluster rows, then field rows); returns a copy.
    """
    out = np.array(table, dtype=np.float32, copy=True)
    sep, unknown = assignment.scheme.separator, assignment.scheme.unknown
    weights = np.array([assignment.user_counts[c] for c in assignment.clusters], np.float64)
    for row, cid in enumerate(assignment.clusters):
        if weights[row] > 0:
            continue
        if cid == unknown and assignment.user_rows is not None:
            padded = np.vstack([table, np.zeros((1, table.shape[1]), table.dtype)])
            users = padded[np.where(assignment.user_rows < 0, len(table), assignment.user_rows)]
            out[row] = users.astype(np.float64).sum(axis=1).mean(axis=0)
            continue
        under = np.array(
            [w > 0 and (cid == unknown or c.startswith(cid + sep))
             for c, w in zip(assignment.clusters, weights, strict=True)]
        )  # fmt: skip
        if under.any():
            w = weights[under]
            out[row] = (w[:, None] * table[: len(weights)][under]).sum(axis=0) / w.sum()
    return out


def user_vectors(
    table: EmbeddingTable, profiles: Mapping[str, Mapping[str, Any]], user_ids: Sequence[Any]
) -> np.ndarray:
    """float32 [n, embedding_dim]: the vector the service computes for each user when the
    client sends the profile from `profiles` (none when the user has no row: the unknown
    cluster, as for a request without a profile). Same code as the service's resolver."""
    scheme = table.user_clusters.scheme
    out = np.empty((len(user_ids), table.dim), dtype=np.float32)
    cache: dict[str, np.ndarray] = {}
    for i, user in enumerate(user_ids):
        profile = profiles.get(str(user))
        raw = cluster_id(scheme, profile) if profile else scheme.unknown
        vector = cache.get(raw)
        if vector is None:
            vector = table.user_vector(table.vector(table.resolve(raw)), raw)
            cache[raw] = vector
        out[i] = vector
    return out


def append_user_embeddings(
    dataset: RankingDataset,
    clusters: Sequence[str],
    embeddings: np.ndarray,
    user_cluster_index: np.ndarray,
) -> RankingDataset:
    """The dataset with its query's user-cluster embedding appended to every document's
    features, so that tree models can use the embeddings the network learned.

    embeddings: float32 [n_clusters, embedding_dim], row i = clusters[i]; user_cluster_index:
    int [n_queries], the row of each query's user. The new columns are named `user_emb_<i>`.
    """
    embeddings = np.asarray(embeddings, dtype=np.float32)
    index = np.asarray(user_cluster_index, dtype=np.int64)
    if embeddings.ndim != 2 or embeddings.shape[0] != len(clusters):
        raise ValueError("embeddings must be [n_clusters, embedding_dim], one row per cluster")
    if index.shape != (dataset.num_queries,):
        raise ValueError("one cluster index per query expected")
    if index.size and (index.min() < 0 or index.max() >= len(clusters)):
        raise ValueError("cluster index out of range")
    per_doc = np.repeat(embeddings[index], dataset.group_sizes, axis=0)
    names = [f"{EMBEDDING_FEATURE_PREFIX}{i}" for i in range(embeddings.shape[1])]
    return dataset.with_columns(per_doc, names)
