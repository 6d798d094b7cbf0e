"""Features are kept in float32: a finite value it cannot hold is refused, not turned into ±inf."""

from __future__ import annotations

import math

import numpy as np

# Training data and item tables (trainer.features.item_columns) say it the same way.
BEYOND_FLOAT32 = "is beyond the range of float32 (about ±3.4e38), the type features are kept in"
# The smallest magnitude that rounds to inf: float32's largest value plus half its last step
# (a tie rounds to the even neighbour, 2^128).
_OVERFLOW = 2.0**128 - 2.0**103


def beyond_float32(value: float) -> bool:
    """True for a finite number that float32 rounds to ±inf (a written inf or nan is kept)."""
    return math.isfinite(value) and abs(value) >= _OVERFLOW


def to_float32(wide: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values as float32, mask of the finite values that became ±inf). An infinity or NaN
    written as such stays one: trees handle them."""
    with np.errstate(over="ignore"):  # the caller reports the overflow, with its place
        values = np.asarray(wide, dtype=np.float32)
    return values, np.isinf(values) & np.isfinite(wide)
