"""Scoring a whole query-grouped dataset with a published artifact, through the service's own
scorer (so offline figures are what the service will serve)."""

from __future__ import annotations

import numpy as np

from app.artifacts.store import Artifact
from app.scoring.loader import load_scorer
from trainer.data.dataset import RankingDataset
from trainer.data.model_rows import model_columns


def score_dataset(
    artifact: Artifact, data: RankingDataset, user_vectors: np.ndarray | None = None
) -> np.ndarray:
    """Scores float64 [n_docs].

    `user_vectors`: float32 [n_queries, embedding_dim], the user-cluster embedding of each query
    list, for models with user clusters (appended to the features or fed as the ONNX `user`
    input, as the manifest says). Named columns are matched to the model's by name, and item
    features `data` lacks are joined by its document ids from the version's snapshot.
    """
    manifest = artifact.manifest
    uc = manifest.user_clusters
    if uc is not None and user_vectors is None:
        raise ValueError(f"model {manifest.name} needs user-cluster vectors for each query")
    # By name: the nightly gate scores the deployed model on the candidate's columns, which
    # may be another order (a width check alone scored them silently wrong).
    data = model_columns(artifact, data)
    expected = len(manifest.request_feature_names)
    if data.num_features != expected:
        raise ValueError(
            f"{data.source}: {data.num_features} features, model {manifest.name} expects {expected}"
        )
    scorer = load_scorer(artifact)
    features = data.features
    if uc is not None and uc.input == "features":
        assert user_vectors is not None
        per_doc = np.repeat(user_vectors.astype(np.float32), data.group_sizes, axis=0)
        return scorer.score(np.ascontiguousarray(np.hstack([features, per_doc])))
    if uc is None and manifest.kind == "lambdamart":
        return scorer.score(features)
    # Networks score one list at a time, as the service does.
    out = np.empty(data.num_docs, dtype=np.float64)
    for q in range(data.num_queries):
        lo, hi = data.group_offsets[q], data.group_offsets[q + 1]
        user = None if user_vectors is None else user_vectors[q].reshape(1, -1)
        out[lo:hi] = scorer.score(features[lo:hi], user=user)
    return out
