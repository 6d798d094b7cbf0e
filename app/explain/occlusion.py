"""Attribution for networks: occlusion against the missing-value baseline.

For a network f and a row x, feature j's contribution is `f(x) - f(x with x_j missing)`, and
the expected value is `f(every feature missing)`. Missing (NaN) is what the exported graph
replaces by the training mean of a feature that had missing values in training and by 0 for
one that never had (see app.artifacts.manifest.MissingValueRule), so the baseline is that
document, and "missing" is the same thing the service does with a feature a client did not
send. The contributions are exact for a network that is
additive in its features (a linear model: then they are its Shapley values); for any other,
`score - expected_value - sum(contributions)` is the interaction part, reported separately.
Cost: one scorer call on n_rows * (n_features + 1) rows.
"""

from __future__ import annotations

import numpy as np

from app.scoring.protocol import Scorer


def occlusion(
    scorer: Scorer, features: np.ndarray, user: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(contributions float64 [n_rows, n_features + 1], scores float64 [n_rows]).

    Column j < n_features: f(x) - f(x without feature j); last column: f(all missing).
    features: float32 [n_rows, n_features] (NaN = missing).
    """
    x = np.asarray(features, dtype=np.float32)
    n, m = x.shape
    # Per row: the row itself, then m copies each with one feature blanked, then (once) the
    # all-missing baseline.
    batch = np.repeat(x[:, None, :], m + 1, axis=1)  # [n, m + 1, m]
    idx = np.arange(m)
    batch[:, 1 + idx, idx] = np.nan
    stacked = np.concatenate([batch.reshape(-1, m), np.full((1, m), np.nan, np.float32)])
    scores = np.asarray(scorer.score(stacked, user), dtype=np.float64)
    baseline = scores[-1]
    per_row = scores[:-1].reshape(n, m + 1)
    out = np.empty((n, m + 1), dtype=np.float64)
    out[:, :m] = per_row[:, :1] - per_row[:, 1:]
    # A score that is NaN (a network fed a value far beyond its range: inf * 0 inside) made
    # every contribution NaN, and the features listed were the first ones by index. Those
    # whose blanking gives a finite score caused it: infinite, they are listed first.
    caused = np.isnan(out[:, :m]) & np.isfinite(per_row[:, 1:])
    out[:, :m][caused] = np.inf
    out[:, m] = baseline
    return out, per_row[:, 0].copy()
