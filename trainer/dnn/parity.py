"""The export check: onnxruntime must score held-out lists as PyTorch does.

Two runtimes evaluate the same float32 network with different kernels, so scores differ by a few
ulps, and two identical documents can come out one ulp apart in one runtime and equal in the
other. So scores are compared within a tolerance, and orders only where the scores differ by
more than it: a near-tie broken either way is the same ranking.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from app.artifacts.store import load_version
from app.features.embedding_table import EmbeddingTable
from trainer.data.dataset import RankingDataset
from trainer.dnn.models import Ranker
from trainer.dnn.onnx_export import onnx_scores, onnx_session, torch_list_scores, torch_scores
from trainer.export import ExportError

PARITY_MAX_ABS_DIFF = 1e-5
PARITY_LISTS = 200


def ordered_alike(first: np.ndarray, second: np.ndarray, tol: float) -> bool:
    """True when no two documents that `first` scores more than `tol` apart are ranked the other
    way, or tied, by `second`. first, second: float [n_docs] scores of one list."""
    order = np.argsort(first, kind="stable")
    ranked, other = first[order], second[order].astype(np.float64)
    # Documents from index `clear[j]` on score more than tol above document j in `first`:
    # every one of them must score strictly above it in `second` too.
    clear = np.searchsorted(ranked, ranked + tol, side="right")
    lowest_above = np.append(np.minimum.accumulate(other[::-1])[::-1], np.inf)
    return bool(np.all(lowest_above[clear] > other))


def same_ranking(actual: np.ndarray, expected: np.ndarray, tol: float) -> bool:
    """Both score vectors [n_docs] order every pair that either separates by more than tol."""
    actual, expected = actual.astype(np.float64), expected.astype(np.float64)
    return ordered_alike(expected, actual, tol) and ordered_alike(actual, expected, tol)


def verify_parity(
    path: Path,
    ranker: Ranker,
    data: RankingDataset,
    cluster_rows: np.ndarray | None,
    fine_ids: list[str] | None = None,
) -> float:
    """Reload the written version (sha256 checked), score up to PARITY_LISTS lists with
    onnxruntime and with PyTorch; raise ExportError when a score differs by more than
    PARITY_MAX_ABS_DIFF or the rankings differ beyond it. Returns the max abs difference.

    With user clusters, PyTorch reads the list's table rows (`cluster_rows`: int64 [n_queries]
    or [n_queries, 1 + n_fields]) and onnxruntime gets the vector the service's own code
    (EmbeddingTable) builds from the written files for the list's finest id (`fine_ids`)."""
    artifact = load_version(path)
    session = onnx_session(artifact.files["model.onnx"])
    table = None
    if artifact.manifest.user_clusters is not None:
        table = EmbeddingTable.from_files(artifact.manifest, artifact.files)
    worst = 0.0
    for q in range(min(data.num_queries, PARITY_LISTS)):
        lo, hi = data.group_offsets[q], data.group_offsets[q + 1]
        user = None
        if table is not None and cluster_rows is not None and fine_ids is not None:
            raw = fine_ids[q]
            user = table.user_vector(table.vector(table.resolve(raw)), raw)
            expected = torch_list_scores(ranker, data.features[lo:hi], cluster_rows[q])
        else:
            expected = torch_scores(ranker, data.features[lo:hi], None)
        actual = onnx_scores(session, data.features[lo:hi], user)
        diff = float(np.max(np.abs(actual.astype(np.float64) - expected), initial=0.0))
        worst = max(worst, diff)
        agree = same_ranking(actual, expected, PARITY_MAX_ABS_DIFF)
        if diff > PARITY_MAX_ABS_DIFF or not agree:
            raise ExportError(
                f"{path}: onnxruntime scores list {q} differently from PyTorch (max abs "
                f"difference {diff:.3g}, same ranking beyond {PARITY_MAX_ABS_DIFF:g}: {agree}); "
                "the version was removed"
            )
    return worst
