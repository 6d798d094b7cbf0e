"""What every scorer offers the service and the trainer."""

from __future__ import annotations

from typing import Protocol

import numpy as np


class Scorer(Protocol):
    """Scores one request's candidates.

    `features`: float32 [n_docs, n_features] in manifest order, NaN = missing.
    `user`: float32 [embedding_dim] user-cluster embedding for models that take it as a separate
    input (ONNX `user` input), else None.
    Returns float64 [n_docs]. Must be safe to call from several threads at once.
    """

    num_features: int

    def score(self, features: np.ndarray, user: np.ndarray | None = None) -> np.ndarray: ...
