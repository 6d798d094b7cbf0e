"""A trained tree ensemble → a verified model version directory.

`--out DIR` names the version directory itself: DIR's name is the version id (so it must match
the manifest's name pattern) and DIR must not exist yet. `new_version_dir(parent)` gives a
time-sorted id for callers that keep a registry-like `<parent>/<version>/` layout.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from app.artifacts.manifest import (
    NAME_PATTERN,
    Manifest,
    MissingValueRule,
    UserClusters,
    new_version_id,
)
from app.artifacts.store import load_version, write_version_dir
from app.artifacts.tree_dump import TreeEnsemble
from app.errors import LtrError
from app.scoring.reference import predict
from trainer.data.dataset import RankingDataset

ROUNDTRIP_RTOL = 1e-9


class ExportError(LtrError, ValueError):
    """The version could not be written, or does not score as the trained model did."""


def new_version_dir(parent: Path) -> Path:
    """`<parent>/<time-sorted version id>`, e.g. `models/default/20261122T061500123456Z-1a2b3c`."""
    return Path(parent) / new_version_id()


def plain_json(value: Any) -> Any:
    """`value` with numpy scalars/arrays turned into plain JSON types (manifests are JSON)."""
    return orjson.loads(orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY))


def scores_match(actual: np.ndarray, expected: np.ndarray, rtol: float) -> bool:
    """Equal within `rtol` relative to each score, with the scores' scale as the floor.

    The floor keeps scores near zero (where relative error is meaningless) from failing on
    rounding of the large scores they are summed from.
    """
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if actual.shape != expected.shape:
        return False
    scale = max(float(np.max(np.abs(expected), initial=0.0)), 1e-300)
    return bool(np.all(np.abs(actual - expected) <= rtol * np.maximum(np.abs(expected), scale)))


def check_out_dir(out_dir: Path, name: str) -> Path:
    """Refuse, before any work, a version directory that cannot be written."""
    out_dir = Path(out_dir)
    if not re.match(NAME_PATTERN, out_dir.name):
        raise ExportError(
            f"{out_dir}: the directory name is the version id and must match {NAME_PATTERN}"
        )
    if not re.match(NAME_PATTERN, name):
        raise ExportError(f"model name {name!r} must match {NAME_PATTERN}")
    if out_dir.exists():
        raise ExportError(f"{out_dir} already exists (a version is never overwritten)")
    _check_creatable(out_dir)
    return out_dir


def _check_creatable(out_dir: Path) -> None:
    """Refuse an `out_dir` whose parent cannot hold it, found now rather than after training
    (the version is written into a hidden temp directory beside it, which the error would name).

    The nearest existing ancestor must be a directory in which a directory can be created and
    removed again; the missing parents are created only when the version is written.
    """
    ancestor = out_dir.absolute().parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ExportError(f"--out {out_dir}: cannot be created ({ancestor} is not a directory)")
    try:
        probe = tempfile.mkdtemp(prefix=".ltr-out-check.", dir=ancestor)
        Path(probe).rmdir()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ExportError(
            f"--out {out_dir}: cannot be created (cannot create a directory in {ancestor}: "
            f"{reason})"
        ) from None


def export_tree_model(
    ensemble: TreeEnsemble,
    out_dir: Path,
    *,
    name: str,
    feature_names: list[str],
    metrics: dict[str, Any],
    training: dict[str, Any],
    user_clusters: UserClusters | None = None,
    extra_files: dict[str, bytes] | None = None,
    verify_features: np.ndarray | None = None,
    expected_scores: np.ndarray | None = None,
) -> Path:
    """Write `ensemble` as the version directory `out_dir` and prove it scores as trained.

    verify_features: float [n_rows, num_features]; the serialised `model.json` is parsed back
    and these rows scored with the reference scorer before anything is written. expected_scores:
    float64 [n_rows], defaulting to the in-memory ensemble's scores; a mismatch beyond 1e-9
    relative raises ExportError and writes nothing. After writing, the version is loaded back
    (every sha256 checked) and must hold exactly the verified bytes, else it is removed.
    """
    out_dir = check_out_dir(out_dir, name)
    if len(feature_names) != ensemble.num_features:
        raise ExportError(
            f"{len(feature_names)} feature names for a model of {ensemble.num_features} features"
        )
    manifest = Manifest(
        name=name,
        version=out_dir.name,
        kind="lambdamart",
        created_at=dt.datetime.now(dt.UTC),
        feature_names=list(feature_names),
        missing_value=MissingValueRule(handled_by="tree_default_direction"),
        user_clusters=user_clusters,
        metrics=plain_json(metrics),
        training=plain_json(training),
    )
    model_bytes = ensemble.to_json_bytes()
    if verify_features is not None:
        # Score what will be written before anything becomes visible.
        _check_scores(out_dir, model_bytes, verify_features, expected_scores, ensemble)
    path = write_version_dir(out_dir, manifest, {"model.json": model_bytes, **(extra_files or {})})
    try:
        written = load_version(path).files["model.json"]
        if written != model_bytes:
            raise ExportError(f"{path}: model.json on disk differs from the verified model")
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
    return path


def _check_scores(
    out_dir: Path,
    model_bytes: bytes,
    features: np.ndarray,
    expected: np.ndarray | None,
    ensemble: TreeEnsemble,
) -> None:
    reloaded = TreeEnsemble.from_json_bytes(model_bytes, str(out_dir / "model.json"))
    if expected is None:
        expected = predict(ensemble, features)
    actual = predict(reloaded, features)
    if not scores_match(actual, expected, ROUNDTRIP_RTOL):
        worst = float(np.max(np.abs(actual - np.asarray(expected, dtype=np.float64))))
        raise ExportError(
            f"{out_dir}: the exported model scores differently from the trained one "
            f"(max abs difference {worst:.3g}); nothing was written"
        )


def data_fingerprint(data: RankingDataset) -> str:
    """sha256 (first 16 hex digits) of the features, labels and query boundaries."""
    digest = hashlib.sha256()
    for array in (data.features, data.labels, data.group_offsets):
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()[:16]


def metric_entries(
    report: dict[str, float | int], data: RankingDataset, empty_query_ndcg: float
) -> dict[str, dict[str, Any]]:
    """Manifest `metrics`: each metric of a ranking report with the data set it was measured on."""
    where = {
        "dataset": data.source or "in-memory",
        "dataset_fingerprint": data_fingerprint(data),
        "empty_query_ndcg": empty_query_ndcg,
    }
    return {
        key: {"value": value, **where}
        for key, value in report.items()
        if key not in ("queries", "documents")
    }
