"""`ltr features push` warns when a served model reads the set and features the pushed table
lacks: once live, every answer of that model is degraded (`item_set_mismatch`), which the
push did not say (a held-out trial)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from typer.testing import CliRunner

from tests.support import random_ensemble
from tests.support.redis_server import RedisServer
from tests.support.sourced_model import item_table, publish_sourced
from trainer.cli import app
from trainer.features.served_readers import lacking_readers

NAMES = ["c1", "i_pop", "i_price"]
SOURCES = {"i_pop": "item", "i_price": "item"}


def _registry(tmp_path: Path) -> Path:
    root = tmp_path / "registry"
    model = random_ensemble(len(NAMES), num_trees=3, depth=2, seed=1)
    table = item_table(5, ["i_pop", "i_price", "i_spare"])
    publish_sourced(root, model, SOURCES, table, name="shop", feature_names=NAMES)
    publish_sourced(root, model, SOURCES, table, name="other", feature_names=NAMES, set_name="x")
    return root


def test_a_served_reader_of_features_the_table_lacks_is_named(tmp_path: Path) -> None:
    root = _registry(tmp_path)
    (warning,) = lacking_readers(root, "catalog", ["i_pop", "i_spare"])
    assert "model shop (version v1" in warning and "features this table lacks: i_price" in warning
    assert "item_set_mismatch" in warning
    # every feature the model reads is pushed (the set's other columns need not be)
    assert lacking_readers(root, "catalog", ["i_price", "i_pop"]) == []
    assert lacking_readers(root, "nobody-reads-it", ["i_pop"]) == []
    assert lacking_readers(tmp_path / "no-registry", "catalog", ["i_pop"]) == []


def test_a_broken_manifest_is_left_to_the_service(tmp_path: Path) -> None:
    root = _registry(tmp_path)
    (root / "shop" / "v1" / "manifest.json").write_text("{not json")
    assert lacking_readers(root, "catalog", ["i_pop"]) == []


def test_push_warns_on_stderr_and_in_its_json(redis_server: RedisServer, tmp_path: Path) -> None:
    root = _registry(tmp_path)
    table = item_table(5, ["i_pop"], seed=2)
    path = tmp_path / "items.parquet"
    pq.write_table(pa.table({"doc_id": table.ids.tolist(), "i_pop": table.matrix[:, 0]}), path)
    args = ["features", "push", "--set", "catalog", "--items", str(path), "--registry", str(root)]
    result = CliRunner().invoke(app, [*args, "--redis-url", redis_server.url, "--json"])
    assert result.exit_code == 0, result.output
    assert "model shop (version v1" in result.stderr and "lacks: i_price" in result.stderr
    assert "lacks: i_price" in json.loads(result.stdout)["warnings"][0]
