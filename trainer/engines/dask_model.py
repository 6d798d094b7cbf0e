"""`ltr train --engine lightgbm-dask` end to end: the workers read the Parquet data, train,
evaluate and score a verification sample; the client plans, converts and writes the version
directory. Nothing is written unless every step succeeded."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainer.data.dask_parquet import PARTITION_ROWS, ClusterDataset, open_cluster_dataset
from trainer.engines.dask_scoring import cluster_report
from trainer.engines.lightgbm_dask import connect, train_lightgbm_dask
from trainer.engines.training_result import IterationRecord, TrainingResult
from trainer.export import export_tree_model
from trainer.lambdamart.params import LambdaMARTParams

ENGINE = "lightgbm-dask"


def train_cluster_model(
    train_location: str,
    valid_location: str | None,
    params: LambdaMARTParams,
    out: Path,
    *,
    scheduler: str,
    name: str = "default",
    partition_rows: int = PARTITION_ROWS,
    on_iteration: Callable[[IterationRecord], None] | None = None,
    train_files: list[str] | None = None,
    valid_files: list[str] | None = None,
    listen_port: int | None = None,
) -> TrainingResult:
    """Train on the cluster at `scheduler` from Parquet files the workers read (a file,
    directory or glob; local path or fsspec URL; or the given file URLs, the locations then
    only naming them), write the version directory `out`, and return it as
    `trainer.engines.tree_model.train_tree_model` does."""
    from trainer.export import check_out_dir

    check_out_dir(out, name)  # fail before any cluster work
    with connect(scheduler) as client:
        train = open_cluster_dataset(
            client,
            train_location,
            partition_rows=partition_rows,
            files=train_files,
            whole_labels=True,
        )
        valid = None
        if valid_location is not None:
            valid = open_cluster_dataset(
                client,
                valid_location,
                train.feature_names,
                partition_rows=partition_rows,
                files=valid_files,
                whole_labels=True,
            )
        result, sample = train_lightgbm_dask(client, train, params, valid, listen_port)
        if on_iteration is not None:
            for log in result.history:
                on_iteration(log)
        evaluated = valid if valid is not None else train
        report = cluster_report(client, evaluated, result.model_text, params.empty_query_ndcg)
        for data in (train, valid):
            if data is not None:
                data.release()
    training = {
        "engine": ENGINE,
        "params": params.model_dump(mode="json"),
        "data_fingerprint": train.fingerprint,
        "train_source": train_location,
        "valid_source": valid_location,
        "valid_metric": None if valid is None else f"ndcg@{params.eval_at}",
        "best_iteration": result.best_iteration,
        "trees": len(result.ensemble.trees),
        "train_seconds": round(result.total_seconds, 3),
        "cluster": _cluster_summary(train),
    }
    path = export_tree_model(
        result.ensemble,
        out,
        name=name,
        feature_names=train.feature_names,
        metrics=_metric_entries(report, evaluated, params.empty_query_ndcg),
        training=training,
        verify_features=sample,
    )
    evaluated_on = "valid" if valid is not None else "train"
    return TrainingResult.of_trees(path, name, ENGINE, result, report, evaluated_on)


def _cluster_summary(data: ClusterDataset) -> dict[str, Any]:
    return {
        "files": data.num_files,
        "partitions": len(data.parts),
        "documents": data.num_docs,
        "queries": data.num_queries,
    }


def _metric_entries(
    report: dict[str, float | int], data: ClusterDataset, empty_query_ndcg: float
) -> dict[str, dict[str, Any]]:
    """As `trainer.export.metric_entries`, for data the cluster holds."""
    where = {
        "dataset": data.location,
        "dataset_fingerprint": data.fingerprint,
        "empty_query_ndcg": empty_query_ndcg,
    }
    return {
        key: {"value": value, **where}
        for key, value in report.items()
        if key not in ("queries", "documents")
    }
