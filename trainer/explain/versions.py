"""The nightly's global view: a new version and the deployed one explained on the same rows."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from app.artifacts.store import Artifact
from app.explain.tree_tables import ExplainUnavailable
from trainer.data.dataset import RankingDataset
from trainer.explain.contributions import artifact_contributions
from trainer.explain.global_view import changes, summarise

log = logging.getLogger(__name__)

NIGHTLY_ROWS = 2000


def version_views(
    candidate: Artifact,
    deployed: Artifact | None,
    data: RankingDataset,
    rows: int = NIGHTLY_ROWS,
    seed: int = 0,
) -> dict[str, Any]:
    """{"candidate": summary, "deployed": summary | None, "changes": [...], "notes": [...]}.

    Never raises for a model that cannot be explained: the reason goes into `notes`.
    """
    sample = np.sort(np.random.default_rng(seed).permutation(data.num_docs)[:rows])
    features = data.features[sample]
    out: dict[str, Any] = {"candidate": None, "deployed": None, "changes": [], "notes": []}
    for label, artifact in (("candidate", candidate), ("deployed", deployed)):
        if artifact is None:
            continue
        names = artifact.manifest.feature_names
        if names != candidate.manifest.feature_names:
            out["notes"].append(f"{label}: other features than the candidate; not compared")
            continue
        try:
            method, phi, _ = artifact_contributions(artifact, features)
        except ExplainUnavailable as exc:
            out["notes"].append(f"{label}: {exc}")
            continue
        out[label] = summarise(method, names, features, phi)
    if out["candidate"] is not None and out["deployed"] is not None:
        out["changes"] = changes(out["candidate"], out["deployed"])[:20]
    return out
