"""LightGBM lambdarank on a Dask cluster (`DaskLGBMRanker`), for data that outgrows one machine.

The workers hold the data (`trainer.data.dask_parquet`: partitions of whole queries, as
LightGBM's ranking objective needs) and train on what they hold; validation NDCG@k and early
stopping are computed by the workers on the validation partitions they hold and agreed across
them (`dask_validation`, `dask_early_stopping`); no data passes through the client. The model
is converted to the tree dump and checked against `Booster.predict` on a sample the workers
score.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import numpy as np

from app.scoring.reference import predict
from trainer.convert.lightgbm_model import convert_lightgbm
from trainer.engines.dask_early_stopping import (
    GlobalEarlyStopping,
    forget_run,
    global_history,
)
from trainer.engines.dask_scoring import sample_scores
from trainer.engines.dask_validation import plan_validation
from trainer.engines.lightgbm_ranker import (
    CONVERSION_RTOL,
    LIGHTGBM_MAX_QUERY,
    EngineError,
    EngineIteration,
    LightGBMDataError,
    LightGBMResult,
    lightgbm_params,
)
from trainer.export import scores_match
from trainer.lambdamart.params import LambdaMARTParams

if TYPE_CHECKING:
    from distributed import Client

    from trainer.data.dask_parquet import ClusterDataset

_LOG = logging.getLogger("lightgbm")


class _NotOurNJobs(logging.Filter):
    """LightGBM's Dask module warns through its registered logger (not `warnings`) that the
    n_jobs the sklearn wrapper always passes is ignored: Dask sets threads per worker."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Parameter n_jobs will be ignored" not in record.getMessage()


_LOG.addFilter(_NotOurNJobs())

CONNECT_TIMEOUT_SECONDS = 30
WATCH_SECONDS = 0.5  # how often the client checks that every training worker is still there
VERIFY_SAMPLE_ROWS = 10_000


def connect(scheduler_address: str, timeout: float | None = None) -> Client:
    """A client of the scheduler at `scheduler_address` (e.g. `tcp://10.0.0.5:8786`) that has at
    least one worker; EngineError naming the address otherwise."""
    from distributed import Client

    try:
        client = Client(scheduler_address, timeout=timeout or CONNECT_TIMEOUT_SECONDS)
    except (OSError, TimeoutError) as exc:
        raise EngineError(
            f"cannot reach the Dask scheduler at {scheduler_address}: {exc}"
        ) from None
    if not _workers(client):
        client.close()
        raise EngineError(f"the Dask cluster at {scheduler_address} has no workers")
    return client


def _workers(client: Client) -> set[str]:
    # Asked directly: `scheduler_info()` returns a cache that the client's periodic refresh
    # overwrites without the workers.
    assert client.scheduler is not None
    identity = client.sync(client.scheduler.identity, n_workers=-1)
    return set(identity["workers"])


def train_lightgbm_dask(
    client: Client,
    train: ClusterDataset,
    params: LambdaMARTParams,
    valid: ClusterDataset | None = None,
    listen_port: int | None = None,
) -> tuple[LightGBMResult, np.ndarray]:
    """Train on the data the workers hold; keep the best round of global valid NDCG@eval_at.
    `listen_port`: the port LightGBM's network listens on, on every worker machine (one
    worker per machine); None: free ports LightGBM picks at random.

    Returns the result and the verification sample (float32 [<= 10,000, n_features]) that the
    converted model was checked on, for the export to check again after serialising."""
    import lightgbm as lgb

    if train.max_query_size > LIGHTGBM_MAX_QUERY:
        # The client knows the query sizes: refuse before the workers' lambdarank does, with
        # a message naming neither file nor query.
        raise LightGBMDataError(
            f"{train.location}: a query has {train.max_query_size:,} documents: LightGBM's "
            f"lambdarank limits a query to {LIGHTGBM_MAX_QUERY:,} rows; train with "
            "--engine native (no such limit), or cut the list"
        )
    lgb.register_logger(_LOG)  # not print(): `ltr train --json` keeps stdout for its JSON
    start = time.perf_counter()
    metric = f"ndcg@{params.eval_at}"
    lgb_params: dict[str, Any] = lightgbm_params(params, train.max_query_size)
    lgb_params.pop("metric", None)
    lgb_params.pop("eval_at", None)
    lgb_params.pop("num_threads", None)  # each worker uses its own threads
    fit: dict[str, Any] = {"group": train.query_sizes}
    run_key = f"ltr-lightgbm-dask-{uuid.uuid4().hex}"
    lgb_params["metric"] = "None"  # validation is ours (no eval_set: see dask_validation)
    if listen_port is not None:
        _one_worker_per_machine(client, listen_port)
        lgb_params["local_listen_port"] = listen_port
    if valid is not None:
        plan = plan_validation(client, valid, params.eval_at, params.empty_query_ndcg)
        rounds = params.early_stopping_rounds or 0
        fit["callbacks"] = [GlobalEarlyStopping(run_key, metric, plan, rounds)]
    ranker = lgb.DaskLGBMRanker(client=client, n_estimators=params.num_trees, **lgb_params)
    try:
        _fit_watching_workers(client, lambda: ranker.fit(train.features, train.labels, **fit))
        history = global_history(client, run_key) if valid is not None else []
    finally:
        forget_run(client, run_key)
    booster = ranker.booster_
    best = int(booster.best_iteration or booster.current_iteration())
    text = booster.model_to_string(num_iteration=best)
    ensemble = convert_lightgbm(text, train.feature_names, source="LightGBM (Dask) model")
    sample, expected = sample_scores(client, train, text, VERIFY_SAMPLE_ROWS)
    if not scores_match(predict(ensemble, sample), expected, CONVERSION_RTOL):
        raise EngineError("the converted LightGBM model does not score like Booster.predict")
    elapsed = time.perf_counter() - start
    result = LightGBMResult(
        ensemble=ensemble,
        model_text=text,
        best_iteration=best,
        history=[EngineIteration(i + 1, None, v, elapsed) for i, v in enumerate(history)],
        total_seconds=elapsed,
    )
    return result, sample


def _fit_watching_workers(client: Client, fit: Any) -> None:
    """Run `fit` while checking that no worker leaves: LightGBM's collective training cannot
    survive a lost worker, so a death is reported at once, naming the worker."""
    import lightgbm as lgb

    before = _workers(client)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            fit()
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=run, name="lightgbm-dask-fit", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(WATCH_SECONDS)
        gone = before - _workers(client)
        if gone:
            raise EngineError(_lost(gone))
    if not failure:
        return
    exc = failure[0]
    time.sleep(2 * WATCH_SECONDS)  # a crashed peer breaks LightGBM's sockets first
    gone = before - _workers(client)
    if gone:
        raise EngineError(_lost(gone)) from None
    if isinstance(exc, lgb.basic.LightGBMError):
        raise EngineError(f"LightGBM on Dask: {exc}") from None
    raise exc


def _one_worker_per_machine(client: Client, port: int) -> None:
    """A fixed listen port serves one LightGBM worker per machine (LightGBM's own rule):
    refused before training, naming the crowded host, rather than by LightGBM mid-fit."""
    hosts = Counter(urlparse(address).hostname for address in _workers(client))
    crowded = [(host, n) for host, n in hosts.items() if n > 1]
    if crowded:
        host, n = crowded[0]
        raise EngineError(
            f"listen port {port} (--dask-listen-port, or the nightly job's dask.listen_port): "
            f"{host} runs {n} Dask workers, and LightGBM listens on a fixed port once per "
            "machine; run one worker per machine (a pod each) or leave the port to LightGBM"
        )


def _lost(gone: set[str]) -> str:
    names = ", ".join(sorted(gone))
    return (
        f"Dask worker {names} left the cluster during training (died or was killed); "
        "training stopped and nothing was written"
    )
