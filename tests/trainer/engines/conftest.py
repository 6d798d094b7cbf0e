from __future__ import annotations

from pathlib import Path

import pytest

from trainer.data.dataset import RankingDataset
from trainer.data.loader import load_dataset

DEMO = Path(__file__).parents[3] / "trainer" / "demo_data"


@pytest.fixture(scope="session")
def demo_train() -> RankingDataset:
    return load_dataset(DEMO / "rank.train")


@pytest.fixture(scope="session")
def demo_valid(demo_train: RankingDataset) -> RankingDataset:
    return load_dataset(DEMO / "rank.test", num_features=demo_train.num_features)
