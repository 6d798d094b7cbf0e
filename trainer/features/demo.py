"""The `demo-items` model of `ltr serve --demo`: the bundled LightGBM example turned into an
item catalogue, so the id-only request form works out of the box.

Each document of rank.train / rank.test becomes an item `doc-<row>` (test rows continue the
numbering after the training rows). Features f1..f20 stay with the candidate (what a search
frontend has: retrieval scores); f21..f300 move into an item table the model version carries
as its in-process snapshot.
"""

from __future__ import annotations

import contextlib
import os
import sys
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


def publish(registry: Path, train: RankingDataset, test: RankingDataset, params: Any) -> None:
    """Train `demo-items` into a new version of `registry` and make it CURRENT, saying so."""
    from app.artifacts.manifest import new_version_id
    from app.artifacts.store import set_current
    from trainer.commands.errors import echo_err

    version = new_version_id()
    try:
        summary = train_demo_items(train, test, registry / NAME / version, params)
    except Exception as exc:  # the demo model serves regardless; say why this one does not
        echo_err(f"{NAME} was not published: {type(exc).__name__}: {exc}")
        return
    set_current(registry, NAME, version)
    key = f"ndcg@{params.eval_at}"
    ndcg = summary.metrics.get(key)
    # As the demo model's line says it: "test NDCG@10 0.7866".
    shown = f"test NDCG@{params.eval_at} {ndcg:.4f}" if ndcg is not None else f"no test {key}"
    echo_err(f"published {NAME}/{version} (item features in-process, {shown})")


def main(argv: list[str]) -> None:
    """`python -m trainer.features.demo REGISTRY TRAIN TEST PARAMS_JSON`: `ltr serve --demo`'s
    second process, niced so that the server it starts beside comes first."""
    from trainer.data.loader import load_dataset
    from trainer.lambdamart.params import LambdaMARTParams

    with contextlib.suppress(AttributeError, OSError):
        os.nice(10)
    registry, train_file, test_file, params_json = argv
    params = LambdaMARTParams.model_validate_json(params_json)
    train = load_dataset(Path(train_file))
    test = load_dataset(
        Path(test_file), num_features=train.num_features, feature_names=train.names()
    )
    publish(Path(registry), train, test, params)


if __name__ == "__main__":
    main(sys.argv[1:])
