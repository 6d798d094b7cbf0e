"""A model's global view: mean |contribution| per feature over many rows, and for the top
features the (value, contribution) points behind beeswarm and dependence plots."""

from __future__ import annotations

from typing import Any

import numpy as np

POINTS_PER_FEATURE = 400  # enough to see the shape, small enough for report.json
# A plotted point needs no more: full float64 digits made a nightly's report.json 1 MB (an
# operations trial), the points of two models 600 KB of it.
POINT_DIGITS = 6


def summarise(
    method: str,
    names: list[str],
    features: np.ndarray,
    phi: np.ndarray,
    *,
    top: int = 20,
    seed: int = 0,
) -> dict[str, Any]:
    """The global view of contributions phi [n_rows, n_features + 1] of `features`.

    `features` lists the top features by mean |contribution| with up to POINTS_PER_FEATURE
    sampled (value, contribution) points each (value None = missing); `mean_abs` has every
    feature's mean |contribution|.
    """
    m = len(names)
    n = phi.shape[0]
    mean_abs = np.abs(phi[:, :m]).mean(axis=0) if n else np.zeros(m)
    order = np.argsort(-mean_abs, kind="stable")[:top]
    sample = np.random.default_rng(seed).permutation(n)[:POINTS_PER_FEATURE]
    listed = []
    for j in order.tolist():
        if mean_abs[j] == 0.0:
            break
        values = features[sample, j].astype(np.float64)
        listed.append(
            {
                "name": names[j],
                "mean_abs": float(mean_abs[j]),
                # float32 values by their shortest digits (0.73, not 0.7300000190734863).
                "value": [
                    None if not np.isfinite(v) else float(str(np.float32(v)))
                    for v in values.tolist()
                ],
                "contribution": [float(f"{c:.{POINT_DIGITS}g}") for c in phi[sample, j].tolist()],
            }
        )
    return {
        "method": method,
        "rows": int(n),
        "expected_value": float(phi[0, m]) if n else None,
        "features": listed,
        "mean_abs": {names[j]: float(mean_abs[j]) for j in range(m)},
    }


def changes(candidate: dict[str, Any], deployed: dict[str, Any]) -> list[dict[str, Any]]:
    """Per feature, mean |contribution| in both models and the change, largest change first."""
    new, old = candidate["mean_abs"], deployed["mean_abs"]
    rows = [
        {"name": k, "candidate": new.get(k, 0.0), "deployed": old.get(k, 0.0)}
        for k in dict.fromkeys([*new, *old])
    ]
    for row in rows:
        row["change"] = row["candidate"] - row["deployed"]
    rows = [r for r in rows if r["candidate"] or r["deployed"]]
    return sorted(rows, key=lambda r: -abs(r["change"]))
