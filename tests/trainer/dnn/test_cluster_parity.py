"""Training and serving give a profile the same cluster: ids longer than MAX_CLUSTER_ID_LENGTH
fall back by dropping trailing tokens (and the training warning names the length as the
cause), booleans in numeric fields are not numbers."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from app.artifacts.manifest import BucketedField, ClusterScheme, UserClusters
from app.features.clusters import MAX_CLUSTER_ID_LENGTH
from app.features.user_features import UserFeatureResolver
from app.settings import Settings
from tests.app.features.conftest import DIM, make_files, make_manifest, table_vectors
from trainer.dnn.user_clusters import assign_user_clusters, fallback_warning
from trainer.dnn.user_profiles import read_profiles

FIELDS = "abcde"
SCHEME = ClusterScheme(fields=[BucketedField(name=f"f_{c}", kind="categorical") for c in FIELDS])


def long_profiles(n: int, width: int) -> dict[str, dict[str, object]]:
    """`n` users; f_a takes two values, the other fields one per user (all `width` long)."""
    return {
        f"u{i}": {
            f"f_{c}": (str(i % 2) if c == "a" else f"{i}{c}").rjust(width, "V") for c in FIELDS
        }
        for i in range(n)
    }


def served_cluster(
    keys: list[str], profile: dict[str, object], scheme: ClusterScheme = SCHEME
) -> tuple[str, list[str]]:
    """The cluster and reasons the service's resolver gives a request with `profile`."""
    uc = UserClusters(scheme=scheme, embedding_dim=DIM, field_embeddings=False)
    manifest = make_manifest().model_copy(update={"user_clusters": uc})
    files = make_files(keys, table_vectors(len(keys)))
    resolver = UserFeatureResolver(Settings(redis_url=None))
    resolver.register_model(manifest, files)
    got = asyncio.run(resolver.resolve(manifest, {"profile": profile}))
    assert got.cluster is not None
    return got.cluster, got.reasons


def test_training_and_serving_fall_back_from_an_over_long_id_alike() -> None:
    """A trial: 52-character values (264-character ids) put every training user in `unknown`
    and a request with a known f_a in `unknown` too, while 48-character values gave clusters."""
    profiles = long_profiles(40, 52)
    users = np.array(sorted(profiles))
    assignment = assign_user_clusters(SCHEME, profiles, users, 3)
    first = {str(profiles[u]["f_a"]) for u in users}
    assert set(assignment.clusters) == {"unknown", *first}
    assert assignment.user_counts["unknown"] == 0
    for user, row in zip(users, assignment.train_rows, strict=True):
        trained = assignment.clusters[row]
        assert trained == profiles[user]["f_a"]
        assert served_cluster(assignment.clusters, profiles[user]) == (trained, [])
    request = {f"f_{c}": c * 64 for c in FIELDS} | {"f_a": profiles["u1"]["f_a"]}
    assert served_cluster(assignment.clusters, request) == (profiles["u1"]["f_a"], [])


def test_the_warning_names_the_length_not_the_group_size() -> None:
    profiles = long_profiles(40, 52)
    users = np.array(sorted(profiles))
    for field_embeddings in (True, False):
        assignment = assign_user_clusters(
            SCHEME, profiles, users, 3, field_embeddings=field_embeddings
        )
        warning = fallback_warning(assignment, 3)
        assert warning is not None
        assert f"longer than the {MAX_CLUSTER_ID_LENGTH} characters" in warning
        assert "(up to 264)" in warning
        assert "fewer than --min-cluster-count" not in warning
    # Without field rows every user is in a coarser row: the length is why.
    assert warning.startswith("user features carry little: 100% of the 40 training users")
    assert "40 of them have a cluster id longer" in warning


def test_ids_within_the_limit_are_not_warned_about() -> None:
    profiles = long_profiles(40, 48)  # 244-character ids
    users = np.array(sorted(profiles))
    assignment = assign_user_clusters(SCHEME, profiles, users, 1, field_embeddings=True)
    assert assignment.over_long == {}
    assert fallback_warning(assignment, 1) is None


NUMERIC = ClusterScheme(
    fields=[
        BucketedField(name="country", kind="categorical"),
        BucketedField(name="price_level", kind="numeric", prefix="p", edges=[1.0, 3.0]),
    ]
)


def test_a_boolean_in_a_numeric_field_is_x_in_training_and_serving(tmp_path) -> None:
    """A trial: a request's `"price_level": true` resolved to JP_p1 (true read as 1)."""
    path = tmp_path / "users.parquet"
    table = {
        "user_id": ["u0", "u1", "u2"],
        "country": ["JP"] * 3,
        "price_level": [True, False, None],
    }
    pq.write_table(pa.table(table), path)
    profiles = read_profiles(path)
    users = np.array(["u0", "u1", "u2", "u0"])
    assignment = assign_user_clusters(NUMERIC, profiles, users, 3)
    assert assignment.clusters == ["unknown", "JP", "JP_px"]
    assert {assignment.clusters[r] for r in assignment.train_rows} == {"JP_px"}
    for value in (True, False):
        request = json.loads(json.dumps({"country": "JP", "price_level": value}))
        assert served_cluster(assignment.clusters, request, NUMERIC) == ("JP_px", [])
    number = {"country": "JP", "price_level": 2}
    assert served_cluster(assignment.clusters, number, NUMERIC) == ("JP", [])
