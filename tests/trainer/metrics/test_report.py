"""The standard report agrees with the individual metrics."""

from __future__ import annotations

import numpy as np
import pytest

from trainer.metrics.average_precision import mean_average_precision
from trainer.metrics.err import mean_err
from trainer.metrics.ndcg import mean_dcg, mean_ndcg
from trainer.metrics.reciprocal_rank import mean_reciprocal_rank
from trainer.metrics.report import ranking_report


@pytest.mark.parametrize("empty_value", [1.0, 0.0])
def test_report_matches_metrics(empty_value: float) -> None:
    rng = np.random.default_rng(0)
    sizes = rng.integers(1, 30, size=40)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    labels = rng.integers(0, 3, size=offsets[-1]) * (rng.random(offsets[-1]) < 0.6)
    scores = rng.integers(0, 5, size=offsets[-1]).astype(np.float64)  # many ties
    report = ranking_report(scores, labels, offsets, empty_value=empty_value)
    assert list(report) == [
        "ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "map", "mrr", "err@10", "dcg@10", "queries",
        "documents",
    ]  # fmt: skip
    for k in (1, 3, 5, 10):
        assert report[f"ndcg@{k}"] == mean_ndcg(scores, labels, offsets, k, empty_value)
    assert report["map"] == mean_average_precision(scores, labels, offsets, empty_value=empty_value)
    assert report["mrr"] == mean_reciprocal_rank(scores, labels, offsets, empty_value=empty_value)
    assert report["err@10"] == mean_err(scores, labels, offsets, 10)
    assert report["dcg@10"] == mean_dcg(scores, labels, offsets, 10)
    assert report["queries"] == 40 and report["documents"] == int(sizes.sum())
    assert isinstance(report["queries"], int) and isinstance(report["documents"], int)


@pytest.mark.parametrize("empty_value", [1.0, 0.5, 0.0])
def test_empty_value_sets_ndcg_map_mrr_not_err(empty_value: float) -> None:
    """A query with no relevant document: NDCG, MAP and MRR take the convention (LightGBM's
    NDCG and map@k give 1), ERR is 0 by its definition, DCG is 0."""
    report = ranking_report(np.zeros(1), np.zeros(1), np.array([0, 1]), empty_value=empty_value)
    for key in ("ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "map", "mrr"):
        assert report[key] == empty_value, key
    assert report["err@10"] == 0.0 and report["dcg@10"] == 0.0
