"""Examination probability per position, estimated from click logs by EM under the
position-based click model (PBM; Wang et al. 2018, "Position bias estimation for unbiased
learning to rank in personal search").

PBM: P(click | doc d at position k) = theta_k * gamma_d, examination independent of relevance.
EM treats examination E and relevance R as hidden. For a non-clicked row,
P(E=1, R=0 | c=0) = theta (1 - gamma) / (1 - theta gamma) and
P(E=0, R=1 | c=0) = (1 - theta) gamma / (1 - theta gamma); a click means E = R = 1.
M-step: theta_k = mean over rows at k of P(E=1 | c), and gamma is refitted to P(R=1 | c).

Two relevance models (`relevance=`):
- "regression" (regression-EM, Wang et al. section 4): gamma = sigmoid of an additive model over
  per-feature quantile bins (one-hot, L2-regularised), one Newton step per EM iteration on the
  soft targets P(R=1 | c). Works when each (query, document) is shown only once, as in
  `ltr simulate` logs: the relevance model absorbs what the logging ranker saw, so what is left
  to explain the click rate at position k is theta_k.
- "pairs" (plain EM, Wang et al. section 3): one gamma per (query id, document id) key; needs the
  same document shown at several positions for the same query (real traffic with result churn).

Intervention harvesting (Agarwal et al. 2019) needs several logging rankers; the simulated logs
have one, so it is not used. theta is returned relative to position 1 (theta_1 = 1): PBM only
identifies theta up to scale, and inverse-propensity weights only need ratios.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from trainer.data.errors import DataFormatError

Relevance = Literal["regression", "pairs"]
_EPS = 1e-6


@dataclass(frozen=True)
class PropensityEstimate:
    theta: np.ndarray  # float64 [max_position], relative examination, theta[0] == 1
    impressions: np.ndarray  # int64 [max_position], rows shown at each position
    ctr: np.ndarray  # float64 [max_position], observed click rate (NaN where never shown)
    method: str
    iterations: int
    log_likelihood: float  # per row, at the last iteration

    def to_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "theta": [round(float(t), 6) for t in self.theta],
            "impressions": self.impressions.tolist(),
            "ctr": [None if np.isnan(c) else round(float(c), 6) for c in self.ctr],
            "iterations": self.iterations,
            "log_likelihood": self.log_likelihood,
        }


def ctr_by_position(
    positions: np.ndarray, clicks: np.ndarray, max_position: int
) -> tuple[np.ndarray, np.ndarray]:
    """(click rate float64 [max_position] (NaN where never shown), impressions int64 [...]) for
    1-based positions [n] and 0/1 clicks [n]; rows past max_position are left out."""
    keep = positions <= max_position
    pos = positions[keep] - 1
    shown = np.bincount(pos, minlength=max_position).astype(np.int64)
    clicked = np.bincount(pos, weights=clicks[keep].astype(np.float64), minlength=max_position)
    with np.errstate(invalid="ignore", divide="ignore"):
        return clicked / shown, shown


def _bin_columns(features: np.ndarray, bins: int) -> tuple[np.ndarray, int]:
    """Column index of each (row, feature) in a one-hot design: int64 [n, n_features], and the
    number of columns. Each feature gets up to `bins` quantile bins plus one for NaN."""
    n, n_features = features.shape
    cols = np.empty((n, n_features), dtype=np.int64)
    offset = 0
    qs = np.linspace(0.0, 1.0, bins + 1)[1:-1]
    for f in range(n_features):
        x = features[:, f].astype(np.float64)
        finite = np.isfinite(x)
        edges = np.unique(np.quantile(x[finite], qs)) if finite.any() else np.empty(0)
        b = np.searchsorted(edges, x, side="right")
        b[~finite] = edges.size + 1
        cols[:, f] = offset + b
        offset += edges.size + 2
    return cols, offset


class _AdditiveLogit:
    """gamma = sigmoid(b + sum_f w[bin of feature f]); Newton steps on soft targets. The one-hot
    design is kept as column indices [n, n_features], never materialised."""

    def __init__(self, features: np.ndarray, bins: int, l2: float) -> None:
        self.cols, width = _bin_columns(features, bins)
        self.width = width + 1  # the last column is the intercept (not regularised)
        self.n_features = features.shape[1]
        self.penalty = np.full(self.width, l2)
        self.penalty[width] = 0.0
        self.w = np.zeros(self.width)

    def predict(self) -> np.ndarray:
        logit = self.w[self.cols].sum(axis=1) + self.w[-1]
        return np.asarray(1.0 / (1.0 + np.exp(-logit)))

    def step(self, target: np.ndarray) -> None:
        p = self.predict()
        d, f = self.width, self.n_features
        residual = p - target
        grad = np.bincount(self.cols.ravel(), np.repeat(residual, f), d) + self.penalty * self.w
        grad[-1] = residual.sum()
        h = p * (1.0 - p)
        hess = np.zeros((d, d))
        for j in range(f):  # X^T diag(h) X one feature's columns at a time
            pair = self.cols[:, j : j + 1] * d + self.cols
            hess += np.bincount(pair.ravel(), np.repeat(h, f), d * d).reshape(d, d)
        by_col = np.bincount(self.cols.ravel(), np.repeat(h, f), d)
        hess[-1, :] += by_col
        hess[:, -1] += by_col
        hess[-1, -1] = h.sum()
        hess[np.diag_indices_from(hess)] += self.penalty + _EPS
        self.w -= np.linalg.solve(hess, grad)


class _PairMeans:
    """gamma per (query, document) key: the mean of P(R=1 | c) over that key's rows."""

    def __init__(self, keys: np.ndarray) -> None:
        _, self.inverse = np.unique(keys, return_inverse=True)
        self.count = np.bincount(self.inverse).astype(np.float64)
        self.gamma = np.full(self.count.size, 0.5)

    def predict(self) -> np.ndarray:
        return np.asarray(self.gamma[self.inverse])

    def step(self, target: np.ndarray) -> None:
        self.gamma = np.bincount(self.inverse, weights=target) / self.count


def estimate_propensities(
    positions: np.ndarray,
    clicks: np.ndarray,
    *,
    features: np.ndarray | None = None,
    keys: np.ndarray | None = None,
    relevance: Relevance = "regression",
    max_position: int | None = None,
    iterations: int = 100,
    tol: float = 1e-7,
    bins: int = 8,
    l2: float = 1.0,
) -> PropensityEstimate:
    """EM under PBM. positions int [n] (1-based), clicks 0/1 [n]; `features` float32
    [n, n_features] for relevance="regression", `keys` [n] (one per query-document pair) for
    "pairs". Rows shown past `max_position` (default: the largest position) are left out."""
    positions = np.asarray(positions, dtype=np.int64)
    clicks = np.asarray(clicks, dtype=np.float64)
    if positions.shape != clicks.shape or positions.ndim != 1:
        raise ValueError("positions and clicks must be 1-D arrays of the same length")
    if positions.size == 0 or positions.min() < 1:
        raise ValueError("positions must be non-empty and 1-based")
    k_max = int(positions.max()) if max_position is None else int(max_position)
    ctr, shown = ctr_by_position(positions, clicks, k_max)
    keep = positions <= k_max
    pos, c = positions[keep] - 1, clicks[keep]
    model: _AdditiveLogit | _PairMeans
    if relevance == "regression":
        if features is None:
            raise ValueError('relevance="regression" needs features')
        model = _AdditiveLogit(np.asarray(features)[keep], bins, l2)
    elif relevance == "pairs":
        if keys is None:
            raise ValueError('relevance="pairs" needs keys')
        model = _PairMeans(np.asarray(keys)[keep])
    else:
        raise ValueError(f"unknown relevance model {relevance!r}")
    first_ctr = ctr[0] if shown[0] else np.nanmax(ctr)
    theta = np.clip(np.nan_to_num(ctr / max(first_ctr, _EPS), nan=0.5), 0.01, 1.0)
    previous = -np.inf
    ll = -np.inf
    done = 0
    for done in range(1, iterations + 1):
        gamma = np.clip(model.predict(), _EPS, 1.0 - _EPS)
        t = theta[pos]
        p_click = t * gamma
        ll = float(np.mean(c * np.log(p_click) + (1.0 - c) * np.log1p(-p_click)))
        not_clicked = 1.0 - c
        examined = c + not_clicked * t * (1.0 - gamma) / (1.0 - p_click)
        relevant = c + not_clicked * (1.0 - t) * gamma / (1.0 - p_click)
        sums = np.bincount(pos, weights=examined, minlength=k_max)
        theta = np.where(shown > 0, sums / np.maximum(shown, 1), theta)
        theta = np.clip(theta, _EPS, 1.0)
        model.step(relevant)
        if ll - previous < tol:
            break
        previous = ll
    theta = _fill_unseen(theta / theta[0] if shown[0] else theta, shown)
    return PropensityEstimate(theta, shown, ctr, f"pbm-em/{relevance}", done, ll)


def _fill_unseen(theta: np.ndarray, shown: np.ndarray) -> np.ndarray:
    """Positions never shown take the value of the nearest shown position above them."""
    out = theta.copy()
    for k in range(1, out.size):
        if shown[k] == 0:
            out[k] = out[k - 1]
    return out


def write_propensities(path: Path, estimate: PropensityEstimate, **extra: Any) -> None:
    path.write_text(json.dumps({**estimate.to_json(), **extra}, indent=2) + "\n")


def load_propensities(path: Path) -> tuple[np.ndarray, np.ndarray | None]:
    """(theta float64 [K], ctr float64 [K] or None) from a propensities.json written by
    `ltr dataset --from-logs`, or from `ltr simulate --clicks`'s truth.json (`clicks.theta`)."""
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise DataFormatError(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise DataFormatError(f"{path}: not a readable JSON file ({exc})") from None
    if isinstance(doc, dict) and "theta" not in doc and isinstance(doc.get("clicks"), dict):
        doc = doc["clicks"]  # truth.json keeps the click model under "clicks"
    theta = doc.get("theta") if isinstance(doc, dict) else None
    if not isinstance(theta, list) or not theta:
        raise DataFormatError(f"{path}: no 'theta' list (examination probability per position)")
    values = np.asarray([t if isinstance(t, int | float) else np.nan for t in theta], float)
    bad = ~np.isfinite(values) | (values <= 0) | (values > 1.0 + 1e-9)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise DataFormatError(f"{path}: theta[{k}] = {theta[k]!r} is not a number in (0, 1]")
    ctr = doc.get("ctr")
    ctr_values = None
    if isinstance(ctr, list) and len(ctr) == len(theta):
        ctr_values = np.asarray([np.nan if v is None else v for v in ctr], dtype=np.float64)
    return values, ctr_values
