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
