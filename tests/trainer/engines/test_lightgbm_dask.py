from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import distributed
import numpy as np
import pytest

from app.scoring.reference import predict
from trainer.data.loader import load_dataset
from trainer.engines.lightgbm_dask import query_aligned_chunks, train_lightgbm_dask
from trainer.lambdamart.params import LambdaMARTParams
from trainer.metrics.ndcg import mean_ndcg

DEMO = Path(__file__).resolve().parents[3] / "trainer" / "demo_data"


@pytest.fixture(scope="module")
def cluster_address() -> Iterator[str]:
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        yield cluster.scheduler_address


def test_chunks_never_split_a_query() -> None:
    data = load_dataset(DEMO / "rank.train")
    rows, queries = query_aligned_chunks(data, 3)
    assert sum(rows) == data.num_docs and sum(queries) == data.num_queries
    assert len(rows) == 3
    q_edges = np.cumsum(queries)
    np.testing.assert_array_equal(np.cumsum(rows), data.group_offsets[q_edges])


@pytest.mark.slow
def test_trains_on_a_two_worker_cluster(cluster_address: str) -> None:
    train = load_dataset(DEMO / "rank.train")
    test = load_dataset(DEMO / "rank.test", num_features=train.num_features)
    params = LambdaMARTParams(num_trees=30, num_leaves=15, learning_rate=0.1, threads=1)
    result = train_lightgbm_dask(train, params, cluster_address)
    assert len(result.ensemble.trees) == 30
    scores = predict(result.ensemble, test.features)
    # Clearly better than the input order, which carries no signal here.
    assert (
        mean_ndcg(scores, test.labels, test.group_offsets, 10)
        > mean_ndcg(np.zeros(test.num_docs), test.labels, test.group_offsets, 10) + 0.03
    )


@pytest.mark.slow
def test_ltr_train_engine_lightgbm_dask(cluster_address: str, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from app.artifacts.store import load_version
    from trainer.cli import app

    out = tmp_path / "v1"
    args = ["train", "--train", str(DEMO / "rank.train"), "--out", str(out), "--num-trees", "5"]
    args += ["--engine", "lightgbm-dask", "--dask-scheduler", cluster_address, "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    manifest = load_version(out).manifest
    assert manifest.training["engine"] == "lightgbm-dask"
    assert manifest.training["trees"] == 5


def test_dask_engine_without_a_scheduler_is_a_clear_error(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from trainer.cli import app

    args = ["train", "--train", str(DEMO / "rank.train"), "--out", str(tmp_path / "v1")]
    result = CliRunner().invoke(app, [*args, "--engine", "lightgbm-dask", "--num-trees", "2"])
    assert result.exit_code != 0
    assert "--dask-scheduler" in result.output
