"""`ltr train --engine dnn`: train a LambdaDNN/LambdaDCN ranker and write it as a verified
model version (model.onnx, plus clusters.json and embeddings.npy with user clusters)."""

from __future__ import annotations

import datetime as dt
import io
import re
import shutil
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from app.artifacts.manifest import NAME_PATTERN, Manifest, MissingValueRule, UserClusters
from app.artifacts.store import write_version_dir
from trainer.commands.errors import echo_err
from trainer.data.dataset import RankingDataset
from trainer.dnn.batching import QueryLists
from trainer.dnn.losses import loss_for
from trainer.dnn.models import Ranker, build_ranker
from trainer.dnn.normalisation import fit_standardiser
from trainer.dnn.nothing_learned import never_present_warning
from trainer.dnn.onnx_export import export_onnx
from trainer.dnn.options import DNNOptions
from trainer.dnn.parity import verify_parity
from trainer.dnn.trainer_loop import ProgressSink, deterministic, predict_lists, train_ranker
from trainer.dnn.user_clusters import (
    ClusterConfigError,
    Combinations,
    UserClusterAssignment,
    assign_user_clusters,
    check_profile_fields,
    fallback_warning,
    fill_untrained_rows,
    fine_cluster_ids,
    load_cluster_scheme,
)
from trainer.dnn.user_profiles import read_profiles
from trainer.engines.training_result import TrainingResult
from trainer.export import check_out_dir, data_fingerprint, metric_entries, plain_json
from trainer.metrics.report import ranking_report

DEFAULT_MODEL_NAME = "lambdadnn"


def train_dnn_model(
    train: RankingDataset,
    valid: RankingDataset | None,
    options: DNNOptions,
    out: Path,
    progress: object | None = None,
    *,
    name: str | None = None,
) -> TrainingResult:
    """Train on `train` (early stopping on `valid`), write the version directory `out` and
    check that onnxruntime scores the held-out lists as PyTorch does (trainer.dnn.parity).
    The result's metrics hold the best validation NDCG@eval_at (none without `valid`), scored
    with the user table as exported (untrained rows filled in), as the service scores.

    `out`'s name is the version id; the model name is `name`, else `out`'s parent directory
    name when it is a valid name, else "lambdadnn". `progress` needs `update(iteration,
    train_metric, valid_metric)` and `message(text)` (trainer.progress.TrainingProgress).
    Warnings (user features that carry little, features missing in every training row, scores
    so large that the training diverged) go to `progress.message`, else to stderr.
    """
    out = Path(out)
    model_name = name or (out.parent.name if re.match(NAME_PATTERN, out.parent.name) else "")
    model_name = model_name or DEFAULT_MODEL_NAME
    check_out_dir(out, model_name)
    if valid is not None and valid.num_features != train.num_features:
        raise ValueError(
            f"{valid.source or 'validation data'} has {valid.num_features} features, "
            f"training data {train.num_features}"
        )
    clusters = _user_clusters(train, options)
    if clusters is not None:
        warning = fallback_warning(clusters, options.min_cluster_count)
        if warning is not None:
            _warn(progress, warning)
    never_present = never_present_warning(train)
    if never_present is not None:
        _warn(progress, never_present)
    valid_rows = None
    if clusters is not None and valid is not None:
        valid_rows = clusters.inputs_for(read_profiles(_path(options.user_profiles)), _users(valid))
    train_lists = QueryLists(
        train.features, train.labels, train.group_offsets,
        None if clusters is None else clusters.train_inputs(),
    )  # fmt: skip
    valid_lists = None
    if valid is not None:
        valid_lists = QueryLists(valid.features, valid.labels, valid.group_offsets, valid_rows)
    sink = progress if isinstance(progress, ProgressSink) else None
    with deterministic(options.seed, options.threads):
        ranker = build_ranker(
            options,
            fit_standardiser(train.features),
            None if clusters is None else len(clusters.keys),
            0 if clusters is None else clusters.shared_rows,
        )
        result = train_ranker(
            ranker,
            loss_for(options),
            train_lists,
            train.labels,
            options,
            valid_lists,
            None if valid is None else valid.labels,
            sink,
            # Validation must score as the exported table will (see _fill_untrained_rows).
            None if clusters is None else partial(_fill_untrained_rows, clusters=clusters),
        )
    embeddings = None
    if clusters is not None:
        embeddings = _embedding_table(ranker, clusters)
    model_bytes = export_onnx(ranker)
    files = {"model.onnx": model_bytes}
    user_clusters = None
    if clusters is not None and embeddings is not None:
        buffer = io.BytesIO()
        np.save(buffer, embeddings, allow_pickle=False)
        files["embeddings.npy"] = buffer.getvalue()
        files["clusters.json"] = clusters.clusters_json()
        user_clusters = UserClusters(
            scheme=clusters.scheme,
            embedding_dim=options.embedding_dim,
            input="onnx_input",
            field_embeddings=clusters.field_embeddings,
            **_combination_settings(clusters),
        )
    metrics: dict[str, Any] = {}
    report: dict[str, float | int] | None = None
    if valid is None:
        # As the tree engines: without validation data, the report on the training data.
        report = ranking_report(
            predict_lists(ranker, train_lists), train.labels, train.group_offsets
        )
        metrics = metric_entries(report, train, 1.0)
    elif result.best_valid_ndcg is not None:
        metrics[f"ndcg@{options.eval_at}"] = {
            "value": result.best_valid_ndcg,
            "dataset": valid.source or "validation",
            "dataset_fingerprint": data_fingerprint(valid),
            "empty_query_ndcg": 1.0,
        }
    training = {
        "engine": "dnn",
        "params": options.model_dump(mode="json"),
        "data_fingerprint": data_fingerprint(train),
        "train_source": train.source,
        "best_epoch": result.best_epoch,
        "epochs_run": result.epochs_run,
        "train_seconds": round(result.seconds, 3),
        "lists_per_second": round(result.lists_per_second, 1),
        "torch": torch.__version__,
    }
    if clusters is not None:
        training["cluster_user_counts"] = clusters.user_counts
    names = train.names()
    # The features whose missing value the network reads as their training mean; the others
    # read it as 0 (trainer.dnn.normalisation).
    had_missing = np.isnan(train.features).any(axis=0)
    training["mean_imputed_features"] = [n for n, m in zip(names, had_missing, strict=True) if m]
    manifest = Manifest(
        name=model_name,
        version=out.name,
        kind="lambdadnn",
        created_at=dt.datetime.now(dt.UTC),
        feature_names=names,
        # The manifest's one name for network imputation: the mean, or 0 for a feature the
        # training data never had missing (training.mean_imputed_features lists the former).
        missing_value=MissingValueRule(handled_by="mean_imputation"),
        user_clusters=user_clusters,
        metrics=plain_json(metrics),
        training=plain_json(training),
    )
    path = write_version_dir(out, manifest, files)
    held_out = valid if valid is not None else train
    held_rows = (
        valid_rows if valid is not None else (None if clusters is None else clusters.train_inputs())
    )
    held_ids = None
    if clusters is not None:
        profiles = read_profiles(_path(options.user_profiles))
        held_ids = fine_cluster_ids(clusters.scheme, profiles, [str(u) for u in _users(held_out)])
    try:
        parity = verify_parity(path, ranker, held_out, held_rows, held_ids)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
    if parity.warning is not None:
        _warn(progress, parity.warning)
    return TrainingResult(
        model_dir=path,
        name=manifest.name,
        version=manifest.version,
        kind=manifest.kind,
        engine="dnn",
        metrics=(
            report if report is not None else {k: e["value"] for k, e in manifest.metrics.items()}
        ),
        evaluated_on="train" if valid is None else "valid",
        training=manifest.training,
    )


def _warn(progress: object | None, text: str) -> None:
    """`warning: text` on the progress display (which keeps its bar intact), else stderr as
    the commands print theirs."""
    if isinstance(progress, ProgressSink):
        progress.message(f"warning: {text}")
    else:
        echo_err(f"warning: {text}")


def _path(value: Path | None) -> Path:
    if value is None:
        raise ClusterConfigError("user clusters need both user_profiles and cluster_config")
    return Path(value)


def _users(data: RankingDataset) -> np.ndarray:
    if data.user_ids is None:
        raise ClusterConfigError(
            f"{data.source or 'the data'}: user clusters need the user of every query list "
            "(Parquet column user_id or a .user side file)"
        )
    return data.user_ids


def _user_clusters(train: RankingDataset, options: DNNOptions) -> UserClusterAssignment | None:
    if options.user_profiles is None and options.cluster_config is None:
        return None
    scheme = load_cluster_scheme(_path(options.cluster_config))
    profiles = read_profiles(_path(options.user_profiles))
    check_profile_fields(scheme, profiles, options.cluster_config, options.user_profiles)
    combinations = None
    if options.field_embeddings and options.combination_buckets:
        combinations = Combinations(options.combination_buckets, options.combination_max_fields)
    return assign_user_clusters(
        scheme,
        profiles,
        _users(train),
        options.min_cluster_count,
        options.field_embeddings,
        combinations,
    )


def _combination_settings(clusters: UserClusterAssignment) -> dict[str, int]:
    """The manifest's `combination_*` settings (none when the table has no combinations)."""
    if clusters.combinations is None:
        return {}
    return {
        "combination_buckets": clusters.combinations.buckets,
        "combination_max_fields": clusters.combinations.max_fields,
    }


def _fill_untrained_rows(ranker: Ranker, clusters: UserClusterAssignment) -> None:
    """Write the exported values of the table rows no training list reaches (fill_untrained_rows)
    into the ranker. No training list reads those rows, so training is unchanged; validation and
    the parity check then score a user resolved to one as the exported model does."""
    assert ranker.embedding is not None
    table = fill_untrained_rows(clusters, ranker.table.detach().numpy())
    with torch.no_grad():
        ranker.embedding.weight[:-1].copy_(torch.from_numpy(table))


def _embedding_table(ranker: Ranker, clusters: UserClusterAssignment) -> np.ndarray:
    """float32 [n_keys, embedding_dim] with the untrained rows filled in, written back into
    the ranker so that the parity check compares the same table."""
    _fill_untrained_rows(ranker, clusters)
    return ranker.table.detach().numpy().copy()
