"""The export check: onnxruntime must score held-out lists as PyTorch does.

Two runtimes evaluate the same float32 network with different kernels (other summation orders,
fused operations), so scores differ by rounding, and two identical documents can come out one
ulp apart in one runtime and equal in the other. Rounding grows with the magnitude of the
numbers involved: float32 keeps 24 significant bits (machine epsilon 2^-23, Goldberg 1991,
"What every computer scientist should know about floating-point arithmetic"), so a score of
300 is only known to ~3e-5. So scores are compared within a tolerance of an absolute floor plus
a multiple of epsilon times the list's largest score, and orders only where the scores differ
by more than it: a near-tie broken either way is the same ranking.

Scores that are not finite, or so large that float32 barely resolves them, mean the training
diverged (e.g. too high a learning rate), not that the export is wrong: the first is an error
that says so, the second a warning (ParityReport.warning).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.artifacts.store import load_version
from app.features.embedding_table import EmbeddingTable
from trainer.data.dataset import RankingDataset
from trainer.dnn.models import Ranker
from trainer.dnn.onnx_export import onnx_scores, onnx_session, torch_list_scores, torch_scores
from trainer.export import ExportError

PARITY_MAX_ABS_DIFF = 1e-5  # the absolute floor, for scores near 0
# Relative part: 2^-16 = 128 float32 ulps of the list's largest score, far above the few ulps
# two runtimes' kernels differ by after a handful of layers, far below what a wrong graph
# (another imputation, another user vector) changes.
PARITY_RELATIVE = 2.0**-16
PARITY_LISTS = 200
# Scores beyond this magnitude are resolved by float32 only to 1/16 and worse: a network whose
# scores reach it has diverged.
LARGE_SCORE = 1e6


def parity_tolerance(scale: float) -> float:
    """The largest difference allowed between the two runtimes' scores of a list whose largest
    score magnitude is `scale`."""
    return PARITY_MAX_ABS_DIFF + PARITY_RELATIVE * scale


@dataclass(frozen=True)
class ParityReport:
    """What the check saw over the lists it scored."""

    max_abs_diff: float  # the largest difference between the two runtimes' scores
    max_abs_score: float  # the largest score magnitude (PyTorch)

    @property
    def warning(self) -> str | None:
        """A warning when the scores are so large that the training must have diverged."""
        if self.max_abs_score <= LARGE_SCORE:
            return None
        return (
            f"scores reach {self.max_abs_score:.3g} in magnitude on the held-out lists (float32 "
            f"resolves them only to {float(np.spacing(np.float32(self.max_abs_score))):.3g}): "
            "the training probably diverged; try a lower --learning-rate"
        )


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
) -> ParityReport:
    """Reload the written version (sha256 checked), score up to PARITY_LISTS lists with
    onnxruntime and with PyTorch; raise ExportError when a score differs by more than
    `parity_tolerance` of the list's largest score, when the rankings differ beyond it, or when
    a score is not finite (the training diverged).

    With user clusters, PyTorch reads the list's table rows (`cluster_rows`: int64 [n_queries]
    or [n_queries, 1 + n_fields]) and onnxruntime gets the vector the service's own code
    (EmbeddingTable) builds from the written files for the list's finest id (`fine_ids`)."""
    artifact = load_version(path)
    session = onnx_session(artifact.files["model.onnx"])
    table = None
    if artifact.manifest.user_clusters is not None:
        table = EmbeddingTable.from_files(artifact.manifest, artifact.files)
    worst, largest = 0.0, 0.0
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
        expected, actual = expected.astype(np.float64), actual.astype(np.float64)
        if not np.all(np.isfinite(expected)):
            raise ExportError(
                f"{path}: the trained network scores list {q} as NaN or infinite: the training "
                "diverged; try a lower --learning-rate; the version was removed"
            )
        scale = float(np.max(np.abs(expected), initial=0.0))
        tol = parity_tolerance(scale)
        diff = float(np.max(np.abs(actual - expected), initial=0.0))  # NaN if onnxruntime's is
        worst, largest = max(worst, diff), max(largest, scale)
        agree = bool(np.all(np.isfinite(actual))) and same_ranking(actual, expected, tol)
        if not diff <= tol or not agree:
            raise ExportError(
                f"{path}: onnxruntime scores list {q} differently from PyTorch (max abs "
                f"difference {diff:.3g}, tolerance {tol:.3g} at scores up to {scale:.3g}, same "
                f"ranking beyond it: {agree}); the version was removed"
            )
    return ParityReport(max_abs_diff=worst, max_abs_score=largest)
