"""What the workers compute with a trained LightGBM model on the data they hold: scores of a
spread sample of rows (to verify the converted model) and the ranking report, summed per
partition and combined on the client. Only the sample and a few numbers reach the client."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from trainer.metrics.report import ranking_report

if TYPE_CHECKING:
    import pandas as pd
    from distributed import Client

    from trainer.data.dask_parquet import ClusterDataset


def sample_scores(
    client: Client, data: ClusterDataset, model_text: str, rows: int
) -> tuple[np.ndarray, np.ndarray]:
    """(features float32 [m, n_features], Booster.predict scores float64 [m]) of about `rows`
    rows spread evenly over every partition, scored where they are held."""
    from dask.delayed import delayed

    per_part = max(1, math.ceil(rows / data.features.npartitions))
    model = client.scatter(model_text, broadcast=True, hash=False)
    tasks = [delayed(_score_sample)(p, model, per_part) for p in data.features.to_delayed()]
    results = client.gather(client.compute(tasks))
    features = np.concatenate([x for x, _ in results]).astype(np.float32, copy=False)
    return features, np.concatenate([s for _, s in results])


def _booster(model_text: str) -> Any:
    import lightgbm as lgb

    return lgb.Booster(model_str=model_text)


def _score_sample(
    features: pd.DataFrame, model_text: str, rows: int
) -> tuple[np.ndarray, np.ndarray]:
    matrix = features.to_numpy(np.float32)
    picked = np.unique(np.linspace(0, len(matrix) - 1, min(rows, len(matrix))).astype(np.int64))
    sample = np.ascontiguousarray(matrix[picked])
    return sample, np.asarray(_booster(model_text).predict(sample), dtype=np.float64)


def cluster_report(
    client: Client, data: ClusterDataset, model_text: str, empty_value: float
) -> dict[str, float | int]:
    """`trainer.metrics.report.ranking_report` of the model on every query of `data`: each
    partition reports its per-query means and query count; the client weights them."""
    from dask.delayed import delayed

    model = client.scatter(model_text, broadcast=True, hash=False)
    blocks = zip(
        data.features.to_delayed(),
        data.labels.to_delayed(),
        data.query_sizes.to_delayed(),
        strict=True,
    )
    tasks = [delayed(_partition_report)(x, y, q, model, empty_value) for x, y, q in blocks]
    return combine_reports(client.gather(client.compute(tasks)))


def _partition_report(
    features: pd.DataFrame,
    labels: pd.Series,
    sizes: pd.Series,
    model_text: str,
    empty_value: float,
) -> dict[str, float | int]:
    scores = np.asarray(_booster(model_text).predict(features.to_numpy(np.float32)))
    offsets = np.concatenate([[0], np.cumsum(sizes.to_numpy())]).astype(np.int64)
    return ranking_report(scores, labels.to_numpy(np.float64), offsets, empty_value)


def combine_reports(reports: list[dict[str, float | int]]) -> dict[str, float | int]:
    """One report from reports on disjoint sets of queries (means weighted by queries)."""
    queries = sum(int(r["queries"]) for r in reports)
    out: dict[str, float | int] = {}
    for key in reports[0]:
        if key in ("queries", "documents"):
            out[key] = sum(int(r[key]) for r in reports)
        else:
            out[key] = sum(float(r[key]) * int(r["queries"]) for r in reports) / queries
    return out
