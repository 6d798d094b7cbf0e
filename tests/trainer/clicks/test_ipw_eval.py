"""Offline evaluation on clicks without position bias: trainer.clicks.ipw_eval."""

from __future__ import annotations

import numpy as np
import pytest

from tests.trainer.clicks.conftest import pbm_clicks
from trainer.clicks.ipw_eval import ipw_relabel
from trainer.data.dataset import RankingDataset
from trainer.data.errors import DataFormatError
from trainer.metrics.ndcg import mean_dcg


def _clicks(n_queries: int, seed: int) -> tuple[RankingDataset, np.ndarray, np.ndarray]:
    """(click data with served positions, true relevance [n], theta [docs])."""
    sim = pbm_clicks(n_queries, docs=10, seed=seed)
    data = RankingDataset(
        features=np.ascontiguousarray(sim.features),
        labels=sim.clicks.astype(np.float64),
        group_offsets=sim.offsets,
        query_ids=np.arange(n_queries),
        positions=sim.positions,
        source="clicks",
    )
    return data, sim.relevance, sim.theta


def test_gain_is_divided_by_the_examination_of_the_served_position() -> None:
    data, _, theta = _clicks(30, 0)
    graded = RankingDataset(
        features=data.features,
        labels=data.labels * np.resize([1.0, 2.0, 0.5], data.num_docs),
        group_offsets=data.group_offsets,
        query_ids=data.query_ids,
        positions=data.positions,
    )
    out = ipw_relabel(graded, theta[:4])  # positions past 4 take theta[3]
    assert data.positions is not None
    exam = theta[np.minimum(data.positions, 4) - 1]
    np.testing.assert_allclose(np.exp2(out.labels) - 1, (np.exp2(graded.labels) - 1) / exam)
    assert out.labels[graded.labels == 0].max() == 0.0
    np.testing.assert_array_equal(out.features, graded.features)
    assert out.source.endswith("(IPW labels)")


@pytest.mark.parametrize("seed", [1, 2])
def test_ipw_dcg_estimates_the_true_dcg_where_raw_clicks_favour_the_served_order(
    seed: int,
) -> None:
    data, relevance, theta = _clicks(5000, seed)
    ipw = ipw_relabel(data, theta)
    offsets = data.group_offsets
    assert data.positions is not None
    served, best = -data.positions.astype(np.float64), relevance
    # log2(1 + relevance) as labels: gain = P(click | examined), what clicks can estimate.
    truth = np.log2(1.0 + relevance)
    true_served, true_best = (mean_dcg(s, truth, offsets, 5) for s in (served, best))
    ipw_served, ipw_best = (mean_dcg(s, ipw.labels, offsets, 5) for s in (served, best))
    raw_served, raw_best = (mean_dcg(s, data.labels, offsets, 5) for s in (served, best))
    assert true_best > true_served * 1.15
    assert raw_served > raw_best  # raw clicks prefer the ranking that was shown...
    assert ipw_best > ipw_served * 1.1  # ...IPW clicks the better one
    assert ipw_served == pytest.approx(true_served, rel=0.06)
    assert ipw_best == pytest.approx(true_best, rel=0.06)


def test_bad_input() -> None:
    data, _, theta = _clicks(5, 3)
    no_positions = RankingDataset(
        features=data.features,
        labels=data.labels,
        group_offsets=data.group_offsets,
        query_ids=data.query_ids,
        source="plain.parquet",
    )
    with pytest.raises(DataFormatError, match=r"plain\.parquet: unbiased evaluation"):
        ipw_relabel(no_positions, theta)
    for bad in (np.zeros(3), np.array([]), np.ones((2, 2))):
        with pytest.raises(ValueError, match="theta"):
            ipw_relabel(data, bad)
