"""The cluster scheme checked against itself (separator) and the profile table (fields), and
the warning when most training users end in rows that tell them little apart."""

from pathlib import Path

import numpy as np
import pytest

from trainer.dnn.user_clusters import (
    ClusterConfigError,
    assign_user_clusters,
    check_profile_fields,
    fallback_warning,
    load_cluster_scheme,
)
from trainer.dnn.user_profiles import read_profiles

TWO_FIELDS = """
[[fields]]
name = "country"
kind = "categorical"
values = ["US", "GB"]

[[fields]]
name = "age"
kind = "numeric"
prefix = "a"
edges = [30]
"""


def refusal(tmp_path: Path, text: str) -> tuple[Path, str]:
    """The scheme file holding `text`, and the error loading it raises."""
    path = tmp_path / "scheme.toml"
    path.write_text(text)
    with pytest.raises(ClusterConfigError) as info:
        load_cluster_scheme(path)
    return path, str(info.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[[fields]]\nname = 'country'\nkind = 'categorical'\nvalues = ['US', 'G_B']\n",
            "4: fields.0.values: 'G_B' (field 'country') contains the separator '_'",
        ),
        (
            "separator = '-'\n[[fields]]\nname = 'c'\nkind = 'categorical'\nvalues = ['a-b']\n",
            "5: fields.0.values: 'a-b' (field 'c') contains the separator '-'",
        ),
        (
            "[[fields]]\nname = 'age'\nkind = 'numeric'\nprefix = 'a_'\nedges = [30]\n",
            "4: fields.0.prefix: 'a_' (field 'age') contains the separator '_'",
        ),
    ],
)
def test_a_value_or_prefix_holding_the_separator_is_refused(tmp_path, text, message) -> None:
    path, error = refusal(tmp_path, text)
    assert error.startswith(f"{path}:{message}")
    assert "\n" not in error


@pytest.mark.parametrize("key", ["separator", "unknown"])
def test_an_empty_separator_or_unknown_id_is_refused(tmp_path, key) -> None:
    path = tmp_path / "scheme.toml"
    path.write_text(f"{key} = ''\n" + TWO_FIELDS)
    with pytest.raises(ClusterConfigError, match=f"{key}: String should have at least 1"):
        load_cluster_scheme(path)


def test_the_separator_elsewhere_is_fine(tmp_path) -> None:
    path = tmp_path / "scheme.toml"
    path.write_text("separator = '|'\n" + TWO_FIELDS.replace('"GB"', '"G_B"'))
    assert load_cluster_scheme(path).fields[0].values == ["US", "G_B"]


def test_a_scheme_field_the_profile_table_lacks_is_refused(tmp_path) -> None:
    scheme_path = tmp_path / "scheme.toml"
    scheme_path.write_text(TWO_FIELDS)
    profiles_path = tmp_path / "profiles.csv"
    profiles_path.write_text("user_id,country,device\nu1,US,mobile\n")
    scheme, profiles = load_cluster_scheme(scheme_path), read_profiles(profiles_path)
    with pytest.raises(ClusterConfigError) as info:
        check_profile_fields(scheme, profiles, scheme_path, profiles_path)
    assert str(info.value) == (
        f"{scheme_path}: field 'age' is not a column of the profile table {profiles_path} "
        "(columns: country, device)"
    )
    profiles_path.write_text("user_id,age,country\nu1,20,US\n")
    check_profile_fields(scheme, read_profiles(profiles_path), scheme_path, profiles_path)
    check_profile_fields(scheme, {}, scheme_path, profiles_path)  # no rows: nothing to tell


@pytest.fixture
def scheme(tmp_path):
    path = tmp_path / "scheme.toml"
    path.write_text(TWO_FIELDS)
    return load_cluster_scheme(path)


def profiles_of(n: int) -> dict[str, dict[str, object]]:
    return {
        f"u{i}": {"country": ["US", "GB"][i % 2], "age": 20 + 20 * (i // 2 % 2)} for i in range(n)
    }


def test_every_user_in_unknown_is_a_warning(scheme) -> None:
    users = np.array([f"u{i}" for i in range(12)])
    assignment = assign_user_clusters(scheme, profiles_of(12), users, 20, field_embeddings=True)
    assert assignment.user_counts == {"unknown": 12}
    warning = fallback_warning(assignment, 20)
    assert warning is not None
    assert warning.startswith("user features carry little: 100% of the 12 training users")
    assert "12 in 'unknown', 0 in a coarser cluster row, 0 keep their full" in warning
    assert "--min-cluster-count 20" in warning


def test_coarser_rows_warn_only_without_field_rows(scheme) -> None:
    users = np.array([f"u{i}" for i in range(12)])
    # min 4: country rows (6 users each) survive, the full ids (3 users each) do not.
    for field_embeddings, warns in [(True, False), (False, True)]:
        assignment = assign_user_clusters(
            scheme, profiles_of(12), users, 4, field_embeddings=field_embeddings
        )
        assert assignment.user_counts == {"unknown": 0, "GB": 6, "US": 6}
        warning = fallback_warning(assignment, 4)
        assert (warning is not None) is warns
    assert (
        warning is not None and "100% of the 12 training users fell into a coarser row" in warning
    )


def test_most_users_with_their_own_row_is_no_warning(scheme) -> None:
    users = np.array([f"u{i}" for i in range(12)])
    assignment = assign_user_clusters(scheme, profiles_of(12), users, 3)
    assert assignment.user_counts["unknown"] == 0
    assert fallback_warning(assignment, 3) is None


@pytest.mark.parametrize(
    ("values", "message"),
    [
        # A trial: both were accepted without a word.
        ("['US', 'US']", "4: fields.0.values.1: 'US' (field 'country') is listed twice"),
        (
            "['US', 'other']",
            "4: fields.0.values.1: 'other' (field 'country') is the token of every value the "
            "list lacks, so it cannot be listed",
        ),
    ],
)
def test_a_value_listed_twice_or_other_is_refused(tmp_path, values: str, message: str) -> None:
    text = f"[[fields]]\nname = 'country'\nkind = 'categorical'\nvalues = {values}\n"
    path, error = refusal(tmp_path, text)
    assert error.startswith(f"{path}:{message}")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # A trial: `s_nanedge.toml: fields.0.edges.1: ...` named no line.
        (
            "[[fields]]\nname='country'\nkind='categorical'\n\n[[fields]]\nname='age'\n"
            "kind='numeric'\nprefix='a'\nedges=[25, nan]\n",
            "9: fields.1.edges.1: nan (field 'age') is not a finite number",
        ),
        (
            "# scheme\nseparator = ''\n" + TWO_FIELDS,
            "2: separator: String should have at least 1 character",
        ),
        (TWO_FIELDS + "colour = 'red'\n", "12: fields.1.colour: Extra inputs are not permitted"),
        (TWO_FIELDS.replace('name = "age"', 'name = "country"'), "8: fields.1.name: field"),
        (TWO_FIELDS.replace('kind = "numeric"', "kind = 'number'"), "9: fields.1.kind: Input"),
        ("fields = []\n", "1: fields: the scheme needs at least one field"),
    ],
)
def test_errors_give_the_line_of_the_key(tmp_path, text: str, message: str) -> None:
    path, error = refusal(tmp_path, text)
    assert error.startswith(f"{path}:{message}")
