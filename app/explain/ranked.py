"""Explanations for the results `/rerank` returns: the features with the largest absolute
contributions, their values and the expected value, for one model version.

Trees: exact TreeSHAP (app.explain.treeshap) on the same tree dump the scorer compiled.
Networks: occlusion against the missing-value baseline (app.explain.occlusion).
Explainers are built on first use per loaded model and dropped with it.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np
import orjson

from app.artifacts.store import ArtifactError, load_version
from app.artifacts.tree_dump import TreeDumpError, TreeEnsemble
from app.explain.occlusion import occlusion
from app.explain.top import largest
from app.explain.tree_tables import ExplainUnavailable
from app.explain.treeshap import TreeShapExplainer
from app.registry import LoadedModel

TREESHAP, OCCLUSION = "treeshap", "occlusion"

# Per loaded scorer: its explainer, or why it has none (so a model without covers is read once).
_explainers: weakref.WeakKeyDictionary[object, TreeShapExplainer | ExplainUnavailable] = (
    weakref.WeakKeyDictionary()
)
_lock = threading.Lock()


def tree_explainer(model: LoadedModel) -> TreeShapExplainer:
    """The TreeSHAP explainer of a loaded tree model, built from its verified artifact once;
    raises ExplainUnavailable (every time, decided once) when the dump has no node covers."""
    with _lock:
        found = _explainers.get(model.scorer)
    if found is None:
        try:
            found = _build(model)
        except ExplainUnavailable as exc:
            found = exc
        with _lock:
            found = _explainers.setdefault(model.scorer, found)
    if isinstance(found, ExplainUnavailable):
        raise ExplainUnavailable(str(found))
    return found


def is_ready(model: LoadedModel) -> bool:
    """The model's explainer is built and has explained once (nothing left to warm)."""
    with _lock:
        found = _explainers.get(model.scorer)
    return isinstance(found, TreeShapExplainer) and found.ready


def _build(model: LoadedModel) -> TreeShapExplainer:
    name = model.manifest.model_file
    try:
        artifact = load_version(model.path)  # verifies sha256: the bytes the scorer compiled
        ensemble = TreeEnsemble.from_json_bytes(artifact.files[name], str(model.path / name))
    except (ArtifactError, TreeDumpError, OSError) as exc:  # e.g. pruned from the registry
        raise ExplainUnavailable(f"the model's files cannot be read again: {exc}") from None
    explainer = TreeShapExplainer(ensemble)
    explainer.tables()
    return explainer


def contributions(
    model: LoadedModel, features: np.ndarray, user: np.ndarray | None
) -> tuple[str, np.ndarray, np.ndarray]:
    """(method, contributions float64 [n, n_features + 1] (last = expected value), scores [n])."""
    if model.manifest.kind == "lambdamart":
        phi = tree_explainer(model).contributions(features)
        return TREESHAP, phi, phi.sum(axis=1)
    phi, scores = occlusion(model.scorer, features, user)
    return OCCLUSION, phi, scores


def explain_rows(
    model: LoadedModel,
    features: np.ndarray,
    user: np.ndarray | None,
    top: int,
    scores: np.ndarray,
) -> list[dict[str, Any]]:
    """One explanation per row of features float32 [n, n_features] (the returned results).

    `scores` are the served scores of those rows: `rest` = score - expected value - the shown
    contributions, so expected_value + contributions + rest is exactly the score returned.
    """
    method, phi, _ = contributions(model, features, user)
    names = model.manifest.feature_names
    m = len(names)
    values = shown_values(features[:, :m])
    out = []
    for row, c, score in zip(values, phi, scores.tolist(), strict=True):
        shown = largest(c[:m], top)
        parts = c[shown].tolist()
        expected = float(c[m])
        items = [
            {"name": names[j], "value": row[j], "contribution": part}
            for j, part in zip(shown, parts, strict=True)
        ]
        rest = score - expected - sum(parts)
        out.append({"method": method, "expected_value": expected, "features": items, "rest": rest})
    return out


def shown_values(features: np.ndarray) -> list[list[float | str | None]]:
    """The float32 values the model saw, float32 [n, m], each as its shortest decimal (0.1,
    not 0.100000001); None when missing, and "Infinity" / "-Infinity" for a value beyond
    float32's range (JSON has no infinities, and null would say missing).

    orjson writes a float32 array's values as their shortest round-tripping decimals, as
    numpy's str() of each does (equal on 2.1M random float32 bit patterns), at ~70 ns a value
    against ~650: a hundred explained results of 300 features each took ~50 ms of Python
    holding the GIL, which kept the event loop from answering on time."""
    x = np.ascontiguousarray(features, dtype=np.float32)
    rows: list[list[float | str | None]] = orjson.loads(
        orjson.dumps(x, option=orjson.OPT_SERIALIZE_NUMPY)  # NaN and infinities: null
    )
    for i, j in zip(*np.nonzero(np.isinf(x)), strict=True):
        rows[i][j] = "Infinity" if x[i, j] > 0 else "-Infinity"
    return rows


__all__ = [
    "OCCLUSION",
    "TREESHAP",
    "ExplainUnavailable",
    "explain_rows",
    "is_ready",
    "tree_explainer",
]
