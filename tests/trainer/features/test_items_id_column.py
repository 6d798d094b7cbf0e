"""An item table keyed by its own id column (`item_id`) joins data keyed by `doc_id`:
`--items-id-column` (or `items_id_column` in the spec's `[item]`) names the table's, and the
manifest keeps the data's, the column `ltr evaluate` reads document ids from."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner, Result

from app.artifacts.store import load_version
from tests.support.item_data import ITEM_NAMES, write_sourced_data
from tests.trainer.commands.conftest import one_error_line
from trainer.cli import app

FAST = ["--num-trees", "3", "--num-leaves", "3", "--threads", "1", "--json"]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(train.parquet keyed doc_id, items.parquet keyed item_id)."""
    directory = tmp_path_factory.mktemp("data")
    train, _, items = write_sourced_data(directory, n_queries=20)
    renamed = directory / "items_by_item_id.parquet"
    table = pq.read_table(items)
    pq.write_table(table.rename_columns(["item_id", *table.column_names[1:]]), renamed)
    return train, renamed


def train(out: Path, *args: str) -> Result:
    return CliRunner().invoke(app, ["train", "--out", str(out), *FAST, *args])


def test_the_table_id_column_is_named_apart_from_the_data_one(
    tmp_path: Path, files: tuple[Path, Path]
) -> None:
    data, items = files
    out = tmp_path / "m" / "v1"
    result = train(out, "--train", str(data), "--items", str(items))
    assert result.exit_code == 2  # the table's column is looked for under the data's name
    assert one_error_line(result.stderr).startswith(f"error: {items}: no id column 'doc_id'")
    result = train(out, "--train", str(data), "--items", str(items), "--items-id-column", "item_id")
    assert result.exit_code == 0, result.output
    manifest = load_version(out).manifest
    assert manifest.names_from("item") == ITEM_NAMES
    assert manifest.item_features is not None
    # The data's column: evaluate and explain read the document ids of their data by it.
    assert manifest.item_features.id_column == "doc_id"
    evaluated = CliRunner().invoke(
        app, ["evaluate", "--model", str(out), "--data", str(data), "--json"]
    )
    assert evaluated.exit_code == 0, evaluated.output
    assert json.loads(evaluated.stdout)["items"]["id_column"] == "doc_id"


def test_the_spec_names_it_too(tmp_path: Path, files: tuple[Path, Path]) -> None:
    data, items = files
    spec = tmp_path / "features.toml"
    spec.write_text(f'[item]\ntable = "{items}"\nitems_id_column = "item_id"\n')
    out = tmp_path / "v2"
    result = train(out, "--train", str(data), "--features-spec", str(spec))
    assert result.exit_code == 0, result.output
    assert load_version(out).manifest.source("price") == "item"


def test_an_unknown_item_key_stops_training(tmp_path: Path, files: tuple[Path, Path]) -> None:
    """The held-out trial's spec: it trained, with no item features and no error."""
    data, _ = files
    spec = tmp_path / "spec3.toml"
    spec.write_text('query = ["query_length"]\n[item]\nfoo = "x"\n')
    result = train(tmp_path / "v4", "--train", str(data), "--features-spec", str(spec))
    assert result.exit_code == 2
    assert one_error_line(result.stderr) == (
        f"error: {spec}: [item] unknown key(s) ['foo'] (expected table, set, id_column, "
        "items_id_column; see docs/FEATURES.md)"
    )
    assert not (tmp_path / "v4").exists()


def test_the_table_without_the_data_id_column_is_refused_by_name(tmp_path: Path) -> None:
    """Both columns named and the data lacking its own: the error names the data file."""
    data = tmp_path / "train.parquet"
    pq.write_table(pa.table({"qid": [1, 1], "label": [1.0, 0.0], "bm25": [0.1, 0.2]}), data)
    items = tmp_path / "items.parquet"
    pq.write_table(pa.table({"item_id": ["a"], "price": [1.0]}), items)
    args = ["--train", str(data), "--items", str(items), "--items-id-column", "item_id"]
    result = train(tmp_path / "v5", *args)
    assert result.exit_code == 2
    assert one_error_line(result.stderr) == f"error: {data}: no document id column 'doc_id'"


@pytest.mark.parametrize("command", ["evaluate", "explain"])
def test_evaluate_and_explain_join_the_table_by_its_own_column(
    tmp_path: Path, files: tuple[Path, Path], command: str
) -> None:
    """`--items FILE` keyed `item_id` beside data keyed `doc_id`: `--items-id-column` names it
    (the held-out trial's gap: `no id column 'doc_id'` and no way round it)."""
    data, items = files
    out = tmp_path / "m" / "v1"
    result = train(out, "--train", str(data), "--items", str(items), "--items-id-column", "item_id")
    assert result.exit_code == 0, result.output
    base = [command, "--model", str(out), "--data", str(data), "--json"]
    if command == "explain":
        base += ["--out", str(tmp_path / "why.html")]
    refused = CliRunner().invoke(app, [*base, "--items", str(items)])
    assert refused.exit_code == 2
    assert "no id column 'doc_id'" in one_error_line(refused.stderr)
    assert one_error_line(refused.stderr).endswith("give --items-id-column NAME")
    joined = CliRunner().invoke(app, [*base, "--items", str(items), "--items-id-column", "item_id"])
    assert joined.exit_code == 0, joined.output
    from_snapshot = CliRunner().invoke(app, base)
    key = "ndcg@10" if command == "evaluate" else "features"
    assert json.loads(joined.stdout)[key] == json.loads(from_snapshot.stdout)[key]
    alone = CliRunner().invoke(app, [*base, "--items-id-column", "item_id"])
    assert alone.exit_code == 2
    assert one_error_line(alone.stderr).endswith("names a column of --items FILE: give both")


def test_the_nightly_reads_the_table_by_features_items_id_column(
    tmp_path: Path, files: tuple[Path, Path]
) -> None:
    """`[features] items_id_column` is the nightly's `--items-id-column`."""
    import shutil

    from trainer.nightly.config import load_config
    from trainer.nightly.run import run_nightly

    data, items = files
    (tmp_path / "data" / "2026-11-21").mkdir(parents=True)
    (tmp_path / "data" / "2026-11-22").mkdir(parents=True)
    shutil.copy(data, tmp_path / "data" / "2026-11-21" / "part-0.parquet")
    shutil.copy(data, tmp_path / "data" / "2026-11-22" / "part-0.parquet")
    lines = [
        f'work_dir = "{tmp_path / "work"}"',
        f'[data]\ndir = "{tmp_path / "data"}"\npartitions = 2',
        f'[features]\nitems = "{items}"\nitem_set = "catalog"\nitems_id_column = "item_id"',
        '[model]\nname = "shop"\nengine = "lightgbm"',
        "[model.lambdamart]\nnum_trees = 3\nnum_leaves = 3\nmin_data_in_leaf = 5\nthreads = 1",
        f'[publish]\nregistry = "{tmp_path / "registry"}"',
    ]
    config = tmp_path / "nightly.toml"
    config.write_text("\n".join(lines) + "\n")
    out = run_nightly(load_config(config))
    manifest = load_version(out.published.path).manifest
    assert manifest.item_features is not None and manifest.item_features.id_column == "doc_id"
    assert manifest.names_from("item") == ITEM_NAMES
