"""Shared data and comparisons for the converter tests: LightGBM's bundled lambdarank example."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trainer.data.dataset import RankingDataset
from trainer.data.letor import read_letor

DEMO = Path(__file__).parents[3] / "trainer" / "demo_data"
MQ2008_FOLD1 = Path(__file__).parents[3] / ".." / "shared" / "datasets" / "mq2008" / "Fold1"


@pytest.fixture(scope="session")
def demo_train() -> RankingDataset:
    return read_letor(DEMO / "rank.train")


@pytest.fixture(scope="session")
def demo_test(demo_train: RankingDataset) -> RankingDataset:
    return read_letor(DEMO / "rank.test", num_features=demo_train.num_features)


def with_missing(features: np.ndarray, seed: int, infinities: bool = True) -> np.ndarray:
    """A copy with NaN (10%), exact zeros (5%) and, optionally, ±inf (1% each) injected."""
    rng = np.random.default_rng(seed)
    out = features.copy()
    out[rng.random(out.shape) < 0.05] = 0.0
    out[rng.random(out.shape) < 0.10] = np.nan
    if infinities:
        out[rng.random(out.shape) < 0.01] = np.inf
        out[rng.random(out.shape) < 0.01] = -np.inf
    return out


def assert_same_ranking(
    ours: np.ndarray, theirs: np.ndarray, offsets: np.ndarray, tol: float
) -> None:
    """Per query, ordering by our scores never puts a document above one that the library
    scores higher by more than `tol` (so only near-ties may order differently)."""
    for q in range(offsets.size - 1):
        a, b = ours[offsets[q] : offsets[q + 1]], theirs[offsets[q] : offsets[q + 1]]
        along_ours = b[np.argsort(-a, kind="stable")]
        assert np.all(np.diff(along_ours) <= tol), f"query {q} ranks differently"


def ranker_model_file(path: Path) -> Path:
    """A 20-tree, 7-leaf LGBMRanker saved with `booster.save_model` (the tester's model)."""
    import lightgbm as lgb

    rng = np.random.default_rng(0)
    x, y = rng.random((400, 5)), rng.integers(0, 4, 400)
    ranker = lgb.LGBMRanker(
        n_estimators=20, num_leaves=7, min_child_samples=5, n_jobs=1, verbose=-1
    )
    ranker.fit(x, y, group=[20] * 20)
    ranker.booster_.save_model(str(path))
    return path


def truncation_offsets(model: bytes) -> list[int]:
    """Cut points: in the header, inside early trees, and just before `end of trees`."""
    return [500, 1200, 2000, 4000, model.index(b"end of trees")]
