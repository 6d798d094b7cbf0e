"""The `demo-items` model of `ltr serve --demo`: the bundled LightGBM example turned into an
item catalogue, so the id-only request form works out of the box.

Each document of rank.train / rank.test becomes an item `doc-<row>` (test rows continue the
numbering after the training rows). Features f1..f20 stay with the candidate (what a search
frontend has: retrieval scores); f21..f300 move into an item table the model version carries
as its in-process snapshot.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trainer.data.dataset import RankingDataset

if TYPE_CHECKING:
    from trainer.engines.training_result import TrainingResult

NAME = "demo-items"
SET = "demo-catalog"
CANDIDATE_FEATURES = 20


def write_tables(train: RankingDataset, test: RankingDataset, out: Path) -> tuple[Path, Path, Path]:
    """(train.parquet, test.parquet, items.parquet) with `doc_id` columns."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = train.names()
    first = 0
    paths = []
    items: dict[str, Any] = {"doc_id": []}
    item_rows = []
    for part, data in (("train", train), ("test", test)):
        ids = [f"doc-{first + i}" for i in range(data.num_docs)]
        first += data.num_docs
        columns: dict[str, Any] = {
            "qid": np.repeat(data.query_ids, data.group_sizes),
            "label": data.labels,
            "doc_id": ids,
        }
        for j in range(CANDIDATE_FEATURES):
            columns[names[j]] = data.features[:, j]
        path = out / f"{part}.parquet"
        pq.write_table(pa.table(columns), path)
        paths.append(path)
        items["doc_id"].extend(ids)
        item_rows.append(data.features[:, CANDIDATE_FEATURES:])
    matrix = np.vstack(item_rows)
    for j, name in enumerate(names[CANDIDATE_FEATURES:]):
        items[name] = matrix[:, j]
    item_path = out / "items.parquet"
    pq.write_table(pa.table(items), item_path)
    return paths[0], paths[1], item_path


def train_demo_items(
    train: RankingDataset, test: RankingDataset, out: Path, params: Any
) -> TrainingResult:
    """Train `demo-items` into the version directory `out` (its item snapshot included)."""
    from trainer.engines.tree_model import train_tree_model
    from trainer.features.sources import FeatureSpec, attach_sources, load_sourced, staging_dir

    with tempfile.TemporaryDirectory(prefix="ltr-demo-items-") as tmp:
        train_path, test_path, items_path = write_tables(train, test, Path(tmp))
        spec = FeatureSpec(query=[], items=items_path, item_set=SET, id_column="doc_id")
        sourced = load_sourced(spec, train_path, test_path)
        staged = staging_dir(out)
        result = train_tree_model("native", sourced.train, sourced.valid, params, staged, name=NAME)
        return replace(result, model_dir=attach_sources(staged, out, sourced.plan))
