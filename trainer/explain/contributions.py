"""Per-feature contributions of a model version on rows: the service's own explainers
(TreeSHAP for trees, occlusion for networks) run from the same verified artifact."""

from __future__ import annotations

import numpy as np

from app.artifacts.store import Artifact
from app.explain.occlusion import occlusion
from app.explain.tree_tables import ExplainUnavailable
from app.explain.treeshap import TreeShapExplainer

ONNX_CHUNK_ROWS = 256  # x (n_features + 1) rows per onnxruntime call


def artifact_contributions(
    artifact: Artifact, features: np.ndarray
) -> tuple[str, np.ndarray, np.ndarray]:
    """(method, contributions float64 [n_rows, n_features + 1] (last column the expected
    value), scores float64 [n_rows]).

    Raises ExplainUnavailable (tree dumps without covers, models with a user input).
    """
    manifest = artifact.manifest
    if manifest.user_clusters is not None:
        raise ExplainUnavailable(
            f"{artifact.path}: the model uses user-cluster embeddings; "
            "offline explanations cover models without them"
        )
    if manifest.kind == "lambdamart":
        from app.artifacts.tree_dump import TreeEnsemble

        where = str(artifact.path / "model.json")
        ensemble = TreeEnsemble.from_json_bytes(artifact.files["model.json"], where)
        try:
            phi = TreeShapExplainer(ensemble).contributions(features)
        except ExplainUnavailable as exc:
            raise ExplainUnavailable(f"{artifact.path}: {exc}") from None
        from app.scoring.reference import predict

        # The scores the service serves (bit for bit): the contributions' sum differs from
        # them in the last bits, which could order tied documents otherwise.
        return "treeshap", phi, predict(ensemble, features)
    from app.scoring.loader import load_scorer

    scorer = load_scorer(artifact)
    parts = [
        occlusion(scorer, features[start : start + ONNX_CHUNK_ROWS])
        for start in range(0, features.shape[0], ONNX_CHUNK_ROWS)
    ]
    phi = np.concatenate([p[0] for p in parts])
    return "occlusion", phi, np.concatenate([p[1] for p in parts])
