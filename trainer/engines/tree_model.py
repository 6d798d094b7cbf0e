"""Tree models from in-memory data behind one call: native LambdaMART (`trainer.lambdamart`) or
LightGBM lambdarank (`trainer.engines.lightgbm_ranker`), exported as a verified version
directory. LightGBM on a Dask cluster reads its data on the workers
(`trainer.engines.dask_model`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from app.artifacts.manifest import UserClusters
from trainer.data.dataset import RankingDataset
from trainer.engines.training_result import IterationRecord, LearnedTrees, TrainingResult
from trainer.lambdamart.params import LambdaMARTParams

if TYPE_CHECKING:
    from trainer.lambdamart.lambdas import LambdaObjective
    from trainer.progress import TrainingProgress

TREE_ENGINES = ("native", "lightgbm", "lightgbm-dask")
VERIFY_ROWS = 10_000  # rows re-scored after writing; enough to cover every leaf in practice


def train_tree_model(
    engine: str,
    train: RankingDataset,
    valid: RankingDataset | None,
    params: LambdaMARTParams,
    out: Path,
    *,
    name: str = "default",
    progress: TrainingProgress | None = None,
    objective: LambdaObjective | None = None,
    valid_metric: str = "ndcg",
    user_clusters: UserClusters | None = None,
    user_files: dict[str, bytes] | None = None,
    user_training: dict[str, Any] | None = None,
) -> TrainingResult:
    """Train with `engine`, write the version directory `out`, return what was written. The native
    engine stops early on `valid_metric` ("ndcg", or "dcg" for IPW-labelled clicks).

    With `user_clusters` (input "features") the last `embedding_dim` columns of `train` and
    `valid` are the user vectors (trainer.engines.user_embeddings.with_user_vectors) and
    `user_files` (clusters.json, embeddings.npy) go into the version with the model.

    The result's metrics are the ranking report on the set named by its evaluated_on ("valid"
    when `valid` is given, else "train").
    """
    from app.scoring.reference import predict
    from trainer.export import data_fingerprint, export_tree_model, metric_entries
    from trainer.metrics.report import ranking_report

    if engine not in TREE_ENGINES:
        raise ValueError(f"unknown tree engine {engine!r}")

    def on_iteration(log: IterationRecord) -> None:
        if progress is not None:
            progress.update(log.iteration, log.train_ndcg, log.valid_ndcg)

    rows = _verify_rows(train.num_docs)
    extra: dict[str, Any] = {}
    expected: np.ndarray | None = None
    result: LearnedTrees
    if engine == "native":
        from trainer.lambdamart.booster import train as native_train

        native = native_train(
            train,
            params,
            valid,
            on_iteration,
            objective,
            "dcg" if valid_metric == "dcg" else "ndcg",
        )
        if objective is not None:  # e.g. lambdamart.unbiased.click_objective (click logs)
            extra["objective"] = getattr(objective, "description", type(objective).__name__)
        if native.train_scores is not None:
            # The trainer's own (binned) scores: the written model must reproduce them.
            expected = native.train_scores[rows]
        extra["lambda_seconds"] = round(native.lambda_seconds, 3)
        result = native
    elif engine == "lightgbm-dask":
        # The cluster engine never takes data the client holds: the workers read the files.
        raise ValueError(
            "lightgbm-dask trains from Parquet files the Dask workers read: "
            "use trainer.engines.dask_model.train_cluster_model"
        )
    else:
        from trainer.engines.lightgbm_ranker import train_lightgbm

        result = train_lightgbm(train, params, valid, on_iteration)
    ensemble = result.ensemble
    evaluated = valid if valid is not None else train
    report = ranking_report(
        predict(ensemble, evaluated.features),
        evaluated.labels,
        evaluated.group_offsets,
        empty_value=params.empty_query_ndcg,
        # The manifest names the validation metric: its value must be among the metrics.
        ndcg_at=params.eval_at if valid is not None and valid_metric == "ndcg" else None,
    )
    training = {
        "engine": engine,
        "params": params.model_dump(mode="json"),
        "data_fingerprint": data_fingerprint(train),
        "train_source": train.source,
        "valid_source": None if valid is None else valid.source,
        "valid_metric": None if valid is None else f"{valid_metric}@{params.eval_at}",
        "best_iteration": result.best_iteration,
        "trees": len(ensemble.trees),
        "train_seconds": round(result.total_seconds, 3),
        **extra,
        **(user_training or {}),
    }
    path = export_tree_model(
        ensemble,
        out,
        name=name,
        feature_names=train.names(),
        metrics=metric_entries(report, evaluated, params.empty_query_ndcg),
        training=training,
        user_clusters=user_clusters,
        extra_files=user_files,
        verify_features=train.features[rows],
        expected_scores=expected,
    )
    evaluated_on = "valid" if valid is not None else "train"
    return TrainingResult.of_trees(path, name, engine, result, report, evaluated_on)


def _verify_rows(n_docs: int) -> np.ndarray:
    """Evenly spread row indices, at most VERIFY_ROWS of them: int64 [n]."""
    if n_docs <= VERIFY_ROWS:
        return np.arange(n_docs)
    return np.linspace(0, n_docs - 1, VERIFY_ROWS).astype(np.int64)
