"""LightGBM lambdarank on a Dask cluster (`DaskLGBMRanker`), for data that outgrows one machine.

Each Dask partition holds whole queries (LightGBM's ranking objective needs a query's documents
on one worker). The result is converted to the tree dump and checked like the local engine.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import numpy as np

from app.scoring.reference import predict
from trainer.convert.lightgbm_model import convert_lightgbm
from trainer.data.dataset import RankingDataset
from trainer.engines.lightgbm_ranker import (
    CONVERSION_RTOL,
    EngineError,
    LightGBMResult,
    lightgbm_params,
)
from trainer.export import scores_match
from trainer.lambdamart.params import LambdaMARTParams


def query_aligned_chunks(
    data: RankingDataset, partitions: int
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(row chunks, query chunks): `partitions` parts of about equal rows; no query is split."""
    partitions = max(1, min(partitions, data.num_queries))
    targets = np.linspace(0, data.num_docs, partitions + 1)[1:-1]
    cuts = np.searchsorted(data.group_offsets, targets)  # query index at each cut
    q_bounds = np.unique(np.concatenate([[0], cuts, [data.num_queries]]))
    row_bounds = data.group_offsets[q_bounds]
    return tuple(int(x) for x in np.diff(row_bounds)), tuple(int(x) for x in np.diff(q_bounds))


def train_lightgbm_dask(
    train: RankingDataset,
    params: LambdaMARTParams,
    scheduler_address: str,
    partitions: int | None = None,
) -> LightGBMResult:
    """Train on the Dask cluster at `scheduler_address` (e.g. `tcp://10.0.0.5:8786`)."""
    import dask.array as da
    import lightgbm as lgb
    from distributed import Client

    start = time.perf_counter()
    try:
        client = Client(scheduler_address, timeout=30)
    except OSError as exc:
        raise EngineError(
            f"cannot reach the Dask scheduler at {scheduler_address}: {exc}"
        ) from None
    with client:
        workers = len(client.scheduler_info()["workers"])
        if workers == 0:
            raise EngineError(f"the Dask cluster at {scheduler_address} has no workers")
        row_chunks, query_chunks = query_aligned_chunks(train, partitions or workers)
        x = da.from_array(train.features, chunks=(row_chunks, train.num_features))
        y = da.from_array(train.labels, chunks=(row_chunks,))
        group = da.from_array(train.group_sizes, chunks=(query_chunks,))
        lgb_params: dict[str, Any] = lightgbm_params(params, int(train.group_sizes.max()))
        lgb_params.pop("metric", None)
        lgb_params.pop("eval_at", None)
        lgb_params.pop("num_threads", None)  # each worker uses its own threads
        ranker = lgb.DaskLGBMRanker(client=client, n_estimators=params.num_trees, **lgb_params)
        try:
            with warnings.catch_warnings():
                # The sklearn wrapper always passes n_jobs; Dask replaces it per worker.
                warnings.filterwarnings("ignore", "Parameter n_jobs will be ignored")
                ranker.fit(x, y, group=group)
        except lgb.basic.LightGBMError as exc:
            raise EngineError(f"LightGBM on Dask: {exc}") from None
        booster = ranker.to_local().booster_
    text = booster.model_to_string()
    ensemble = convert_lightgbm(text, train.names(), source="LightGBM (Dask) model")
    expected = np.asarray(booster.predict(train.features), dtype=np.float64)
    if not scores_match(predict(ensemble, train.features), expected, CONVERSION_RTOL):
        raise EngineError("the converted LightGBM model does not score like Booster.predict")
    return LightGBMResult(
        ensemble=ensemble,
        model_text=text,
        best_iteration=booster.current_iteration(),
        total_seconds=time.perf_counter() - start,
    )
