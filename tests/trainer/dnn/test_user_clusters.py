import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.features.clusters import resolve_cluster
from app.features.field_combinations import bucket_of
from trainer.data.dataset import RankingDataset
from trainer.dnn.user_clusters import (
    ClusterConfigError,
    Combinations,
    append_user_embeddings,
    assign_user_clusters,
    fill_untrained_rows,
    load_cluster_scheme,
)
from trainer.dnn.user_profiles import ProfileTableError, read_profiles

SCHEME_TOML = """
[[fields]]
name = "country"
kind = "categorical"
values = ["US", "GB", "FR"]

[[fields]]
name = "age"
kind = "numeric"
prefix = "a"
edges = [30, 50]
"""

PROFILES_CSV = """user_id,country,age
u1,US,20
u2,US,21
u3,US,25
u4,US,29
u5,US,60
u6,US,70
u7,FR,20
"""


@pytest.fixture
def scheme(tmp_path):
    path = tmp_path / "clusters.toml"
    path.write_text(SCHEME_TOML)
    return load_cluster_scheme(path)


@pytest.fixture
def profiles(tmp_path):
    path = tmp_path / "profiles.csv"
    path.write_text(PROFILES_CSV)
    return read_profiles(path)


def test_rare_clusters_fall_back_to_coarser_then_unknown(scheme, profiles):
    # u8 has no profile row: it is `unknown`, as the service resolves a request without one.
    users = np.array(["u1", "u2", "u3", "u4", "u5", "u6", "u7", "u8", "u1", "u7"])
    assignment = assign_user_clusters(scheme, profiles, users, min_count=3)
    assert assignment.clusters == ["unknown", "US", "US_a0"]
    got = [assignment.clusters[r] for r in assignment.train_rows]
    assert got == ["US_a0"] * 4 + ["US", "US", "unknown", "unknown", "US_a0", "unknown"]
    assert assignment.user_counts == {"unknown": 2, "US": 2, "US_a0": 4}
    assert json.loads(assignment.clusters_json()) == assignment.clusters


def test_training_rows_agree_with_the_service_fallback(scheme, profiles):
    users = np.array(["u1", "u2", "u3", "u4", "u5", "u6", "u7", "u8"])
    assignment = assign_user_clusters(scheme, profiles, users, min_count=2)
    known = set(assignment.clusters)
    for user, row in zip(users, assignment.train_rows, strict=True):
        fine = {"u8": "other_ax"}.get(user) or {
            "u5": "US_a2", "u6": "US_a2", "u7": "FR_a0"
        }.get(user, "US_a0")  # fmt: skip
        assert resolve_cluster(scheme, fine, known) == assignment.clusters[row]
    # New users at validation time resolve the same way.
    rows = assignment.rows_for({"v1": {"country": "US", "age": 45}}, np.array(["v1", "zz"]))
    assert [assignment.clusters[r] for r in rows] == ["US", "unknown"]


def test_a_high_minimum_leaves_only_unknown(scheme, profiles):
    assignment = assign_user_clusters(scheme, profiles, np.array(["u1", "u2"]), min_count=50)
    assert assignment.clusters == ["unknown"]
    assert assignment.train_rows.tolist() == [0, 0]


def test_profiles_from_parquet(tmp_path, scheme):
    path = tmp_path / "profiles.parquet"
    table = pa.table({"user_id": [1, 2], "country": ["GB", None], "age": [40.0, None]})
    pq.write_table(table, path)
    profiles = read_profiles(path)
    assert profiles == {"1": {"country": "GB", "age": 40.0}, "2": {"country": None, "age": None}}
    assignment = assign_user_clusters(scheme, profiles, np.array([1, 1, 2]), min_count=1)
    assert [assignment.clusters[r] for r in assignment.train_rows] == ["GB_a1", "GB_a1", "other_ax"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("user,country\nu1,US\n", "line 1: the header needs a 'user_id' column"),
        ("user_id,country\nu1,US\nu1,GB\n", "line 3: user 'u1' appears twice"),
        ("user_id,country\nu1,US,extra\n", "line 2: wrong number of fields"),
    ],
)
def test_bad_profile_tables_name_file_and_line(tmp_path, text, message):
    path = tmp_path / "p.csv"
    path.write_text(text)
    with pytest.raises(ProfileTableError, match=message) as info:
        read_profiles(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[fields]]\nname = 'age'\nkind = 'numeric'\n", "needs a prefix"),
        ("[[fields]\n", "not valid TOML"),
        ("fields = []\n", "at least one field"),
        ("[[fields]]\nname='a'\nkind='numeric'\nprefix='a'\nedges=[2, 1]\n", "must increase"),
        # A trial: NaN edges trained a whole epoch, then the manifest refused them naming its
        # own file; a field named twice was a level that carries nothing.
        (
            "[[fields]]\nname='a'\nkind='numeric'\nprefix='a'\nedges=[nan, inf]\n",
            r"fields\.0\.edges\.0: nan \(field 'a'\) is not a finite number",
        ),
        (
            "[[fields]]\nname='a'\nkind='numeric'\nprefix='a'\nedges=[1, inf]\n",
            r"fields\.0\.edges\.1: inf",
        ),
        (
            "[[fields]]\nname='c'\nkind='categorical'\n[[fields]]\nname='c'\nkind='categorical'\n",
            r"fields\.1\.name: field 'c' is already in the scheme",
        ),
    ],
)
def test_bad_scheme_configs_name_the_file(tmp_path, text, message):
    path = tmp_path / "scheme.toml"
    path.write_text(text)
    with pytest.raises(ClusterConfigError, match=message) as info:
        load_cluster_scheme(path)
    assert str(path) in str(info.value)


def test_append_user_embeddings_adds_the_query_users_row_to_every_document():
    data = RankingDataset(
        features=np.arange(10, dtype=np.float32).reshape(5, 2),
        labels=np.zeros(5),
        group_offsets=np.array([0, 2, 5]),
        query_ids=np.array([1, 2]),
    )
    table = np.array([[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]], dtype=np.float32)
    out = append_user_embeddings(data, ["unknown", "US"], table, np.array([1, 0]))
    assert out.features.shape == (5, 5)
    np.testing.assert_array_equal(out.features[:, :2], data.features)
    np.testing.assert_array_equal(out.features[:2, 2:], [[1, 2, 3]] * 2)
    np.testing.assert_array_equal(out.features[2:, 2:], np.zeros((3, 3)))
    assert out.names() == ["f1", "f2", "user_emb_0", "user_emb_1", "user_emb_2"]
    with pytest.raises(ValueError, match="one cluster index per query"):
        append_user_embeddings(data, ["unknown", "US"], table, np.array([1]))
    with pytest.raises(ValueError, match="out of range"):
        append_user_embeddings(data, ["unknown", "US"], table, np.array([1, 2]))


def test_untrained_rows_become_the_average_user_under_them(scheme, profiles):
    # min 2: US_a0 (4 users) and US_a2 (2) are kept; US is kept for new US users but no
    # training user reaches it, and nobody falls to unknown.
    users = np.array(["u1", "u2", "u3", "u4", "u5", "u6"])
    assignment = assign_user_clusters(scheme, profiles, users, min_count=2)
    assert assignment.clusters == ["unknown", "US", "US_a0", "US_a2"]
    table = np.array([[9.0, 9.0], [9.0, 9.0], [1.0, 0.0], [4.0, 3.0]], dtype=np.float32)
    filled = fill_untrained_rows(assignment, table)
    expected_mean = (4 * table[2] + 2 * table[3]) / 6
    np.testing.assert_allclose(filled[1], expected_mean)
    np.testing.assert_allclose(filled[0], expected_mean)
    np.testing.assert_array_equal(filled[2:], table[2:])


def test_field_rows_keep_every_field_of_a_rare_cluster(scheme, profiles):
    users = np.array(["u1", "u2", "u3", "u4", "u5", "u6", "u7"])
    assignment = assign_user_clusters(scheme, profiles, users, min_count=2, field_embeddings=True)
    # US_a0 (4 users) and US_a2 (2 users) are clusters; FR_a0 has one user and falls to unknown.
    assert assignment.clusters == ["unknown", "US", "US_a0", "US_a2"]
    # Field values with 2+ users: country US (6), age a0 (5), age a2 (2); FR (1) has no row.
    assert assignment.fields == ["field:age=a0", "field:age=a2", "field:country=US"]
    assert assignment.keys == [*assignment.clusters, *assignment.fields]
    assert json.loads(assignment.clusters_json()) == assignment.keys
    inputs = assignment.train_inputs()
    pad = len(assignment.keys)
    # u1: US_a0 + country US + age a0; u7 (FR_a0): unknown + (no FR row) + age a0.
    assert inputs[0].tolist() == [2, 6, 4]
    assert inputs[6].tolist() == [0, pad, 4]
    new = assignment.inputs_for({"v": {"country": "GB", "age": 65}}, np.array(["v", "none"]))
    assert new.tolist() == [[0, pad, 5], [0, pad, pad]]


def test_untrained_unknown_row_is_the_mean_whole_user_vector(scheme, profiles):
    users = np.array(["u1", "u2", "u3", "u4"])
    assignment = assign_user_clusters(scheme, profiles, users, min_count=2, field_embeddings=True)
    assert assignment.user_counts["unknown"] == 0
    table = np.arange(len(assignment.keys) * 2, dtype=np.float32).reshape(-1, 2)
    filled = fill_untrained_rows(assignment, table)
    rows = assignment.train_inputs()[0]  # every user is US_a0, country US, age a0
    np.testing.assert_allclose(filled[0], table[rows].sum(axis=0))
    assert assignment.clusters[1:3] == ["US", "US_a0"]  # US: its users' mean, i.e. US_a0's row
    np.testing.assert_array_equal(filled[1], table[2])
    np.testing.assert_array_equal(filled[2:], table[2:])


COMBO_SCHEME_TOML = (
    SCHEME_TOML
    + """
[[fields]]
name = "device"
kind = "categorical"
values = ["mobile", "desktop"]
"""
)


def combo_profiles() -> dict[str, dict[str, object]]:
    countries, devices, ages = ["US", "GB", "FR"], ["mobile", "desktop"], [20, 40, 60]
    return {
        f"u{i}": {"country": countries[i % 3], "device": devices[i % 2], "age": ages[i % 5 % 3]}
        for i in range(60)
    }


def combo_scheme(tmp_path, order):
    scheme = load_cluster_scheme(_write(tmp_path, COMBO_SCHEME_TOML))
    by_name = {f.name: f for f in scheme.fields}
    return scheme.model_copy(update={"fields": [by_name[n] for n in order]})


def _write(tmp_path, text):
    path = tmp_path / "combo.toml"
    path.write_text(text)
    return path


def test_combination_rows_do_not_depend_on_the_field_order(tmp_path):
    profiles = combo_profiles()
    users = np.array([f"u{i % 60}" for i in range(150)])
    combos = Combinations(buckets=4096, max_fields=3)
    by_order = {}
    for order in (("country", "device", "age"), ("age", "device", "country")):
        scheme = combo_scheme(tmp_path, order)
        by_order[order] = assign_user_clusters(
            scheme, profiles, users, min_count=5, field_embeddings=True, combinations=combos
        )
    first, second = by_order.values()
    # The cluster ids differ with the order; the field and combination rows do not.
    assert first.clusters != second.clusters
    assert first.fields == second.fields and first.buckets == second.buckets
    assert first.shared_rows == second.shared_rows == len(first.fields) + len(first.buckets)
    assert first.keys[len(first.clusters) :] == second.keys[len(second.clusters) :]
    # [n_queries, 1 + 3 fields + (3 pairs + 1 triple)]; each list's shared rows, as keys.
    for assignment in (first, second):
        assert assignment.train_inputs().shape == (150, 1 + 3 + 4)
        assert assignment.user_rows is not None and assignment.user_rows.shape == (60, 8)

    def shared_keys(assignment):
        pad = len(assignment.keys)
        return [
            sorted(assignment.keys[r] for r in row[1:] if r != pad)
            for row in assignment.train_inputs()
        ]

    assert shared_keys(first) == shared_keys(second)
    # Pairs shared by 5+ users have rows: every (country, device) pair has 10 users.
    for country in ("US", "GB", "FR"):
        for device in ("mobile", "desktop"):
            key = f"field:country={country}&field:device={device}"
            assert bucket_of(key, 4096) in first.buckets


def test_combination_rows_need_field_rows(scheme, profiles):
    with pytest.raises(ClusterConfigError, match="need field embeddings"):
        assign_user_clusters(
            scheme, profiles, np.array(["u1"]), 1, combinations=Combinations(64, 2)
        )
