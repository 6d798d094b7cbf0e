from __future__ import annotations

from pathlib import Path

import lightgbm as lgb
import pytest
from typer.testing import CliRunner

from trainer.data.loader import load_dataset

DEMO = Path(__file__).parents[3] / "trainer" / "demo_data"
TRAIN, TEST = DEMO / "rank.train", DEMO / "rank.test"


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture(scope="session")
def lightgbm_model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small LightGBM lambdarank model.txt trained on the demo data."""
    train = load_dataset(TRAIN)
    ds = lgb.Dataset(train.features, train.labels, group=train.group_sizes, params={"verbose": -1})
    params = {"objective": "lambdarank", "num_leaves": 7, "verbose": -1, "num_threads": 1}
    booster = lgb.train(params, ds, num_boost_round=10)
    path = tmp_path_factory.mktemp("lgb") / "model.txt"
    booster.save_model(str(path))
    return path


def one_error_line(stderr: str) -> str:
    """The single `error: ...` line a failing command prints."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: "), stderr
    return lines[0]
