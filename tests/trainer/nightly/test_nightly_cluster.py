"""The nightly job with model.engine = "lightgbm-dask" against real scheduler and worker
processes: the workers select the date partitions, read and train; gate and publish as usual."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.artifacts.store import load_version, read_current
from trainer.commands.errors import CommandError
from trainer.data.loader import load_dataset
from trainer.data.parquet import write_parquet
from trainer.data.parquet_files import write_query_contiguous
from trainer.nightly.config import load_config
from trainer.nightly.run import run_nightly

DEMO = Path(__file__).resolve().parents[3] / "trainer" / "demo_data"
DAYS = ("2026-11-18", "2026-11-19", "2026-11-20", "2026-11-21")


@pytest.fixture(scope="module")
def partitioned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo data cut into four daily Parquet partitions: directories and a single file."""
    root = tmp_path_factory.mktemp("cluster-data")
    data = load_dataset(DEMO / "rank.train")
    quarters = np.array_split(np.arange(data.num_queries), 4)
    for day, queries in zip(DAYS[:-1], quarters[:-1], strict=True):
        write_query_contiguous(data.subset_queries(queries), root / day, files=2)
    write_parquet(data.subset_queries(quarters[-1]), root / f"{DAYS[-1]}.parquet")
    (root / "_SUCCESS").write_text("")
    return root


def _config(tmp_path: Path, data_dir: Path, scheduler: str, **data: object) -> dict[str, object]:
    return {
        "work_dir": str(tmp_path / "work"),
        "data.dir": str(data_dir),
        "data.partitions": 4,
        "model.name": "nightly",
        "model.engine": "lightgbm-dask",
        "model.lambdamart.num_trees": 30,
        "model.lambdamart.num_leaves": 15,
        "model.lambdamart.learning_rate": 0.1,
        "model.lambdamart.early_stopping_rounds": 5,
        "dask.scheduler": scheduler,
        "dask.partition_rows": 300,
        "publish.registry": str(tmp_path / "registry"),
        **{f"data.{k}": v for k, v in data.items()},
    }


@pytest.mark.slow
def test_nightly_trains_on_the_cluster_and_publishes(
    dask_cluster, partitioned: Path, tmp_path: Path
) -> None:
    config = load_config(None, _config(tmp_path, partitioned, dask_cluster.address))
    outcome = run_nightly(config)
    assert outcome.gate.passed
    assert read_current(tmp_path / "registry", "nightly") == outcome.published.version
    manifest = load_version(outcome.published.path).manifest
    assert manifest.training["engine"] == "lightgbm-dask"
    assert manifest.training["cluster"]["files"] == 4  # two days of two files each
    report = (outcome.report_dir / "report.json").read_text()
    assert "validated on 2026-11-20" in report and "held out 2026-11-21" in report


def test_the_cluster_engine_needs_a_scheduler(tmp_path: Path) -> None:
    overrides = _config(tmp_path, tmp_path, "")
    overrides["dask.scheduler"] = None
    with pytest.raises(CommandError, match=r"needs dask\.scheduler"):
        load_config(None, overrides)


def test_an_unreachable_scheduler_publishes_nothing(
    partitioned: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import trainer.engines.lightgbm_dask as engine
    from tests.support.redis_server import free_port

    monkeypatch.setattr(engine, "CONNECT_TIMEOUT_SECONDS", 2)
    address = f"tcp://127.0.0.1:{free_port()}"
    config = load_config(None, _config(tmp_path, partitioned, address))
    with pytest.raises(CommandError, match=f"cannot reach the Dask scheduler at {address}"):
        run_nightly(config)
    assert read_current(tmp_path / "registry", "nightly") is None
