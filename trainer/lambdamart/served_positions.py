"""Served positions as the click objectives take them: 1-based, one per document."""

from __future__ import annotations

import numpy as np


def served_positions(positions: np.ndarray, labels: np.ndarray | None = None) -> np.ndarray:
    """`positions` as int64 [n_docs], checked to be 1-based and, given `labels` [n_docs], to
    hold one entry per document."""
    pos = np.asarray(positions, dtype=np.int64)
    if labels is not None and pos.shape != labels.shape:
        raise ValueError("positions must have one entry per document")
    if pos.size and pos.min() < 1:
        raise ValueError("positions must be 1-based")
    return pos
