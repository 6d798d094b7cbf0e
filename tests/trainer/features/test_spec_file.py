"""A features spec is read strictly: an unknown key at any level, a value of the wrong type or
an `[item]` section with no table is refused with the file, the section and the key (a
held-out trial's `[item] foo = "x"` trained with no item features and no error)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trainer.cli import app
from trainer.features.spec import FeatureSpec, SpecError, build_spec


def spec_file(tmp_path: Path, text: str, suffix: str = ".toml") -> Path:
    path = tmp_path / f"spec{suffix}"
    path.write_text(text)
    return path


def refused(path: Path) -> str:
    """The one-line refusal of the spec at `path`, given no flags."""
    with pytest.raises(SpecError) as info:
        build_spec(path, None, None, None, None)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and "\n" not in message, message
    return message


@pytest.mark.parametrize(
    "text, expected",
    [
        (  # the held-out trial's spec: it trained with no item features
            'query = ["hour"]\n[item]\nfoo = "x"\n',
            "[item] unknown key(s) ['foo'] (expected table, set, id_column, items_id_column; "
            "see docs/FEATURES.md)",
        ),
        (
            'querys = ["hour"]\n[items]\ntable = "t.parquet"\n',
            "unknown key(s) ['items', 'querys'] (expected query, item; see docs/FEATURES.md)",
        ),
        (
            'query = ["hour"]\n[item]\nset = "catalog"\n',
            "[item] has no 'table' (the item table, Parquet, relative to the spec file; "
            "or give --items)",
        ),
    ],
    ids=["unknown item key", "unknown top-level keys", "item section without a table"],
)
def test_the_refusal_names_the_file_the_section_and_the_keys(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = spec_file(tmp_path, text)
    assert refused(path) == f"{path}: {expected}"


def test_the_item_flag_supplies_the_table_a_shared_spec_leaves_out(tmp_path: Path) -> None:
    path = spec_file(tmp_path, '[item]\nset = "catalog"\nid_column = "doc"\n')
    spec = build_spec(path, None, tmp_path / "items.parquet", None, None)
    assert spec == FeatureSpec([], tmp_path / "items.parquet", "catalog", "doc", None)


@pytest.mark.parametrize(
    "text, expected",
    [
        ('query = "hour"\n', 'query: expected a list of column names like ["hour", "device"], '),
        ("query = [1, 2]\n", "query: expected a list of column names"),
        ('query = ["hour", ""]\n', "query: expected a list of column names"),
        ('query = ["hour", "hour"]\n', "query: 'hour' is listed twice"),
        ('item = "items.parquet"\n', "item: expected a section ([item] in TOML"),
        ("[item]\ntable = 3\n", "[item] table: expected a file name (text), got 3"),
        (
            '[item]\ntable = "t.parquet"\nset = ["a"]\n',
            '[item] set: expected a name (text), got ["a"]',
        ),
        ('[item]\ntable = "t.parquet"\nset = "a b"\n', "[item] set: 'a b' must match"),
        ('[item]\ntable = "t.parquet"\nid_column = ""\n', "[item] id_column: expected a name"),
        ('[item]\ntable = "t.parquet"\nitems_id_column = true\n', "[item] items_id_column:"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused(tmp_path: Path, text: str, expected: str) -> None:
    path = spec_file(tmp_path, text)
    assert expected in refused(path)


def test_json_is_read_as_strictly(tmp_path: Path) -> None:
    doc = {"query": ["hour"], "item": {"table": "items.parquet", "id_colum": "item_id"}}
    path = spec_file(tmp_path, json.dumps(doc), ".json")
    assert "[item] unknown key(s) ['id_colum']" in refused(path)
    path.write_text(json.dumps({"query": "hour"}))
    assert 'query: expected a list of column names like ["hour", "device"], got "hour"' in (
        refused(path)
    )


def test_flags_win_over_the_spec(tmp_path: Path) -> None:
    path = spec_file(
        tmp_path, 'query = ["hour"]\n[item]\ntable = "a.parquet"\nset = "a"\nid_column = "x"\n'
    )
    spec = build_spec(path, "device", tmp_path / "b.parquet", "b", "y", "z")
    assert spec == FeatureSpec(["device"], tmp_path / "b.parquet", "b", "y", "z")


@pytest.mark.parametrize("flag", ["--item-set", "--items-id-column"])
def test_an_item_flag_without_an_item_table_is_refused(flag: str) -> None:
    """It was taken and applied to nothing: the model trained without the items meant."""
    item_set = "catalog" if flag == "--item-set" else None
    column = "item_id" if flag == "--items-id-column" else None
    with pytest.raises(SpecError, match=f"^{flag} .*: no item table to apply it to"):
        build_spec(None, "hour", None, item_set, None, column)


def test_query_features_listed_twice_are_refused() -> None:
    with pytest.raises(SpecError, match=r"^--query-features: 'hour' is listed twice$"):
        build_spec(None, "hour,device,hour", None, None, None)


def test_the_documented_examples_are_one_spec(tmp_path: Path) -> None:
    """docs/FEATURES.md's TOML and JSON examples read as the same spec, every key set."""
    text = (Path(__file__).parents[3] / "docs" / "FEATURES.md").read_text()
    blocks = dict(re.findall(r"```(toml|json)\n(.*?)```", text, flags=re.S))
    toml = spec_file(tmp_path, blocks["toml"])
    as_json = spec_file(tmp_path, blocks["json"], ".json")
    table = tmp_path / "items.parquet"
    expected = FeatureSpec(["query_length", "hour"], table, "catalog", "doc_id", "item_id")
    assert build_spec(toml, None, None, None, None) == expected
    assert build_spec(as_json, None, None, None, None) == expected


@pytest.mark.parametrize("flag", ["hour,,qlen", "hour,", ",hour", "hour, ,qlen"])
def test_an_empty_query_column_in_the_flag_is_refused(flag: str) -> None:
    """It was dropped in silence, while the spec's `query = [""]` is refused."""
    expected = f"--query-features: a column name is empty in {flag!r}"
    with pytest.raises(SpecError, match=f"^{re.escape(expected)}"):
        build_spec(None, flag, None, None, None)


def test_a_blank_query_flag_is_no_query_columns_as_an_empty_spec_list_is(tmp_path: Path) -> None:
    path = spec_file(tmp_path, 'query = ["hour"]\n[item]\ntable = "t.parquet"\n')
    spec = build_spec(path, "", None, None, None)
    assert spec is not None and spec.query == []


def test_the_cli_refuses_an_empty_query_column(tmp_path: Path) -> None:
    args = ["train", "--train", str(tmp_path / "t.parquet"), "--out", str(tmp_path / "v1")]
    result = CliRunner().invoke(app, [*args, "--query-features", "hour,"])
    assert result.exit_code == 2, result.output
    assert "--query-features: a column name is empty in 'hour,'" in result.stderr


@pytest.mark.parametrize("suffix", [".JSON", ".Json"])
def test_a_json_spec_is_read_as_json_whatever_the_case_of_its_extension(
    tmp_path: Path, suffix: str
) -> None:
    path = spec_file(tmp_path, json.dumps({"query": ["hour"]}), suffix)
    spec = build_spec(path, None, None, None, None)
    assert spec is not None and spec.query == ["hour"]


@pytest.mark.parametrize(
    ("suffix", "read_as"), [(".toml", "TOML"), (".json", "JSON"), (".spec", "TOML")]
)
def test_a_spec_that_does_not_parse_says_what_it_was_read_as(
    tmp_path: Path, suffix: str, read_as: str
) -> None:
    path = spec_file(
        tmp_path, "query = [\n" if read_as == "JSON" else '{"query": ["hour"]}', suffix
    )
    assert refused(path).startswith(
        f"{path}: not a valid features spec, read as {read_as} (the file name chooses: one "
        "ending in .json is read as JSON, any other as TOML): "
    )
