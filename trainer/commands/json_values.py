"""Feature values in the commands' JSON reports, spelled as the service spells them."""

from __future__ import annotations

import numpy as np


def json_value(value: float, shortest: bool = False) -> float | str | None:
    """NaN (a missing value) is null; JSON has no infinity (orjson writes null, which reads as
    missing), so +-inf is "Infinity" / "-Infinity" as the service's explanations write it.
    `shortest`: a float32 value by its shortest digits (0.1, not 0.10000000149011612)."""
    if np.isnan(value):
        return None
    if np.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return float(str(np.float32(value))) if shortest else float(value)
