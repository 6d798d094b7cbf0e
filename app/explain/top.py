"""Which features an explanation shows."""

from __future__ import annotations

import numpy as np


def largest(contributions: np.ndarray, top: int) -> list[int]:
    """Indices of the `top` largest |contributions| [n_features], largest first, ties in
    feature order; features contributing exactly 0 are never listed."""
    order = np.argsort(-np.abs(contributions), kind="stable")[:top]
    return order[contributions[order] != 0.0].tolist()
