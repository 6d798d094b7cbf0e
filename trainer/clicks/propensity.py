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

Sparse positions. The maximum-likelihood theta_k of a position with no click is 0, and with one
or two clicks it is mostly noise; 1/theta_k is then an inverse-propensity weight of 10^6 (or a
random 50), which lets a handful of clicks outweigh everything else in IPW training and in the IPW
validation metric. Two constraints keep the estimate where the data supports it:
- pooling: consecutive positions share one theta until the group holds at least `min_clicks`
  clicks (a short remainder at the end joins the group before it), as Hu et al. 2019 share one
  ratio past position 12. Expected examinations are at least the clicks, so theta is at least
  the click-through rate of its group (or of the run of groups the shape constraint below pools
  it with), and no weight 1/theta exceeds impressions / clicks over at least `min_clicks` clicks.
- shape: theta is non-increasing in position, the examination model of Joachims et al. 2017 and
  Wang et al. 2018 (users scan a list from the top). The M-step becomes a weighted isotonic
  regression of the expected examinations per group (pool adjacent violators), which is the exact
  constrained maximiser of the M-step's Bernoulli likelihood (Robertson, Wright & Dykstra 1988,
  "Order restricted statistical inference", ch. 1), so every EM step still raises the likelihood.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from trainer.clicks.randpair import RandPairRatios, randpair_ratios
from trainer.clicks.relevance_models import AdditiveLogit, PairMeans
from trainer.data.dataset import RankingDataset
from trainer.data.errors import DataFormatError

Relevance = Literal["regression", "pairs"]
_EPS = 1e-6
# Clicks a group of positions needs for its own theta: with m clicks the relative standard error
# of theta is about 1/sqrt(m) (Poisson counts), about 30 % at 10.
MIN_CLICKS = 10


@dataclass(frozen=True)
class PropensityEstimate:
    theta: np.ndarray  # float64 [max_position], relative examination, theta[0] == 1
    impressions: np.ndarray  # int64 [max_position], rows shown at each position
    ctr: np.ndarray  # float64 [max_position], observed click rate (NaN where never shown)
    method: str
    iterations: int
    log_likelihood: float  # per row, at the last iteration
    clicks: np.ndarray  # int64 [max_position], clicked rows at each position
    groups: np.ndarray  # int64 [max_position], 0-based group of positions sharing one theta
    min_clicks: int  # the fewest clicks a group of positions rests on (unless all are fewer)
    # What the explored answers gave (trainer.clicks.randpair), when the logs held any.
    randpair: dict[str, Any] | None = None

    def sparse_positions(self) -> list[int]:
        """1-based positions with fewer than `min_clicks` clicks of their own: their theta is
        shared with neighbouring positions."""
        return [int(k) + 1 for k in np.flatnonzero(self.clicks < self.min_clicks)]

    def pooled_ranges(self) -> list[tuple[int, int]]:
        """(first, last) 1-based positions of every group of more than one position."""
        starts = np.flatnonzero(np.diff(self.groups, prepend=-1))
        ends = np.append(starts[1:], self.groups.size) - 1
        return [(int(a) + 1, int(b) + 1) for a, b in zip(starts, ends, strict=True) if b > a]

    def pooling_note(self) -> str | None:
        """The operator's line on positions whose theta is shared, or None when none is."""
        pooled = self.pooled_ranges()
        if not pooled:  # a lone position (a list of one) has theta 1 by definition
            return None
        groups = ", ".join(f"{a}-{b}" for a, b in pooled)
        return (
            f"fewer than {self.min_clicks} training clicks at positions "
            f"{_ranges(self.sparse_positions())}: their examination is estimated jointly "
            f"with neighbouring positions (groups {groups}); more logs give a finer curve"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "theta": [round(float(t), 6) for t in self.theta],
            "impressions": self.impressions.tolist(),
            "clicks": self.clicks.tolist(),
            "ctr": [None if np.isnan(c) else round(float(c), 6) for c in self.ctr],
            "min_clicks": self.min_clicks,
            "pooled_positions": [list(r) for r in self.pooled_ranges()],
            "iterations": self.iterations,
            "log_likelihood": self.log_likelihood,
            **({} if self.randpair is None else {"randpair": self.randpair}),
        }


def _ranges(positions: list[int]) -> str:
    """Sorted distinct positions as ranges: [3, 7, 8, 9, 12] → "3, 7-9, 12"."""
    parts: list[str] = []
    start = prev = positions[0]
    for k in [*positions[1:], None]:
        if k is not None and k == prev + 1:
            prev = k
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if k is not None:
            start = prev = k
    return ", ".join(parts)


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
    min_clicks: int = MIN_CLICKS,
    monotone: bool = True,
) -> PropensityEstimate:
    """EM under PBM. positions int [n] (1-based), clicks 0/1 [n]; `features` float32
    [n, n_features] for relevance="regression", `keys` [n] (one per query-document pair) for
    "pairs". Rows shown past `max_position` (default: the largest position) are left out.
    Consecutive positions share one theta until they hold `min_clicks` clicks; `monotone`
    keeps theta non-increasing in position (module docstring)."""
    positions = np.asarray(positions, dtype=np.int64)
    clicks = np.asarray(clicks, dtype=np.float64)
    if positions.shape != clicks.shape or positions.ndim != 1:
        raise ValueError("positions and clicks must be 1-D arrays of the same length")
    if positions.size == 0 or positions.min() < 1:
        raise ValueError("positions must be non-empty and 1-based")
    if min_clicks < 1:
        raise ValueError(f"min_clicks must be at least 1, got {min_clicks}")
    k_max = int(positions.max()) if max_position is None else int(max_position)
    ctr, shown = ctr_by_position(positions, clicks, k_max)
    keep = positions <= k_max
    pos, c = positions[keep] - 1, clicks[keep]
    clicked = np.rint(np.bincount(pos, weights=c, minlength=k_max)).astype(np.int64)
    model: AdditiveLogit | PairMeans
    if relevance == "regression":
        if features is None:
            raise ValueError('relevance="regression" needs features')
        model = AdditiveLogit(np.asarray(features)[keep], bins, l2)
    elif relevance == "pairs":
        if keys is None:
            raise ValueError('relevance="pairs" needs keys')
        model = PairMeans(np.asarray(keys)[keep])
    else:
        raise ValueError(f"unknown relevance model {relevance!r}")
    groups = pool_positions(clicked, min_clicks)
    n_groups = int(groups[-1]) + 1
    group_shown = np.bincount(groups, weights=shown, minlength=n_groups)
    group_clicks = np.bincount(groups, weights=clicked, minlength=n_groups)
    # Every group has rows (it has clicks, or it is the only group), so the rate is defined.
    group_ctr = group_clicks / group_shown
    start = np.clip(group_ctr / max(group_ctr[0], _EPS), 0.01, 1.0)
    em = _EM(groups[pos], c, group_shown, model, monotone)
    theta, ll, steps = em.run(start, iterations, tol)
    per_position = theta[groups] / theta[0]
    return PropensityEstimate(
        per_position, shown, ctr, f"pbm-em/{relevance}", steps, ll, clicked, groups, min_clicks
    )


def pool_positions(clicks: np.ndarray, min_clicks: int) -> np.ndarray:
    """Group index int64 [K] for per-position click counts [K]: consecutive positions join one
    group until it holds `min_clicks` clicks; a remainder with fewer joins the group before it
    (all positions form one group when there are fewer clicks than that in total)."""
    groups = np.empty(clicks.size, dtype=np.int64)
    current, held = 0, 0
    for k, count in enumerate(clicks.tolist()):
        groups[k] = current
        held += count
        if held >= min_clicks and k < clicks.size - 1:
            current, held = current + 1, 0
    if held < min_clicks and current > 0:
        groups[groups == current] = current - 1
    return groups


def non_increasing(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The weighted least-squares non-increasing fit to values [K] with weights [K] >= 0 (pool
    adjacent violators): float64 [K]."""
    means: list[float] = []
    mass: list[float] = []
    sizes: list[int] = []
    for v, w in zip(values.tolist(), weights.tolist(), strict=True):
        means.append(v)
        mass.append(w)
        sizes.append(1)
        while len(means) > 1 and means[-2] < means[-1]:
            v2, w2, n2 = means.pop(), mass.pop(), sizes.pop()
            total = mass[-1] + w2
            if total > 0:
                means[-1] = (means[-1] * mass[-1] + v2 * w2) / total
            else:
                means[-1] = max(means[-1], v2)
            mass[-1] = total
            sizes[-1] += n2
    return np.repeat(np.asarray(means, dtype=np.float64), sizes)


class _EM:
    """One EM update maps (theta, relevance params) to new ones; SQUAREM (Varadhan & Roland
    2008) extrapolates along two updates, which cuts the slow linear convergence of EM on rare
    clicks by several times. An extrapolation that lowers the likelihood is discarded."""

    def __init__(
        self,
        pos: np.ndarray,
        clicks: np.ndarray,
        shown: np.ndarray,
        model: AdditiveLogit | PairMeans,
        monotone: bool = True,
    ) -> None:
        """pos int64 [n]: the 0-based group of positions each row was shown in; shown [K]: rows
        per group; theta is one value per group."""
        self.pos, self.c, self.shown, self.model = pos, clicks, shown, model
        self.k = shown.size
        self.monotone = monotone

    def loglik(self, theta: np.ndarray) -> float:
        p_click = theta[self.pos] * np.clip(self.model.predict(), _EPS, 1.0 - _EPS)
        c = self.c
        return float(np.mean(c * np.log(p_click) + (1.0 - c) * np.log1p(-p_click)))

    def update(self, theta: np.ndarray) -> np.ndarray:
        """One EM step from (theta, model params); the model moves in place. New theta [K]."""
        gamma = np.clip(self.model.predict(), _EPS, 1.0 - _EPS)
        t = theta[self.pos]
        p_click = t * gamma
        miss = (1.0 - self.c) / (1.0 - p_click)
        examined = self.c + miss * t * (1.0 - gamma)
        relevant = self.c + miss * (1.0 - t) * gamma
        sums = np.bincount(self.pos, weights=examined, minlength=self.k)
        new = np.where(self.shown > 0, sums / np.maximum(self.shown, 1), theta)
        if self.monotone:
            new = non_increasing(new, self.shown.astype(np.float64))
        self.model.step(relevant)
        return np.clip(new, _EPS, 1.0)

    def _pack(self, theta: np.ndarray) -> np.ndarray:
        return np.concatenate([theta, self.model.params])

    def _unpack(self, x: np.ndarray) -> np.ndarray:
        lo, hi = self.model.bounds
        self.model.params = np.clip(x[self.k :], lo, hi)
        return np.clip(x[: self.k], _EPS, 1.0)

    def run(self, theta: np.ndarray, iterations: int, tol: float) -> tuple[np.ndarray, float, int]:
        """(theta, log-likelihood per row, EM updates spent)."""
        ll = self.loglik(theta)
        steps = 0
        while steps < iterations:
            x0 = self._pack(theta)
            x1 = self._pack(self.update(theta))
            x2 = self._pack(self.update(x1[: self.k]))
            steps += 2
            r, v = x1 - x0, x2 - 2.0 * x1 + x0
            alpha = -np.sqrt(r @ r / max(float(v @ v), 1e-30))
            alpha = min(alpha, -1.0)  # -1 is the plain second EM step
            candidate = self._unpack(x0 - 2.0 * alpha * r + alpha * alpha * v)
            candidate = self.update(candidate)  # one step back towards the EM path
            steps += 1
            new_ll = self.loglik(candidate)
            ll_plain = None
            if not np.isfinite(new_ll) or new_ll < ll:
                theta = self._unpack(x2)
                ll_plain = new_ll = self.loglik(theta)
            else:
                theta = candidate
            done = new_ll - ll < tol
            ll = new_ll if ll_plain is None else ll_plain
            if done:
                break
        return theta, ll, steps


def estimate_from_dataset(data: RankingDataset, **options: Any) -> PropensityEstimate:
    """Regression-EM on joined click logs (`trainer.clicks.join`): a row is clicked when its
    label is positive; needs `data.positions`."""
    if data.positions is None:
        raise ValueError(f"{data.source}: no served positions to estimate position bias from")
    clicks = (data.labels > 0).astype(np.int8)
    estimate = estimate_propensities(data.positions, clicks, features=data.features, **options)
    if data.explored is None or not data.explored.any():
        return estimate
    min_clicks = int(options.get("min_clicks", MIN_CLICKS))
    ratios = randpair_ratios(data.positions, clicks, data.group_offsets, data.explored, min_clicks)
    return with_ratios(estimate, ratios)


def with_ratios(estimate: PropensityEstimate, ratios: RandPairRatios) -> PropensityEstimate:
    """EM's theta where the explored answers' ratios do not contradict it (a chi-square test at
    the 1 % level: EM uses every row, so it is the less noisy of two unbiased estimates); else
    theta from the ratios where they have them (positions 1..K), EM's shape past K joined at K,
    kept non-increasing. EM on one fixed ranker's logs stays near raw click ratios, which the
    ratios, independent of what the ranker saw, do contradict (trainer.clicks.randpair)."""
    known = min(ratios.estimated_prefix(), estimate.theta.size)
    if known < 2:
        return replace(estimate, randpair=ratios.to_json())
    agrees, chi_square, dof = ratios.consistent(estimate.theta)
    check = {"em_consistent": agrees, "chi_square": round(chi_square, 3), "dof": dof}
    if agrees:
        return replace(estimate, randpair={**ratios.to_json(), **check})
    theta = estimate.theta.copy()
    theta[:known] = ratios.theta[:known]
    theta[known:] = estimate.theta[known:] * theta[known - 1] / estimate.theta[known - 1]
    theta = non_increasing(theta, estimate.impressions.astype(np.float64))
    theta = np.clip(theta / theta[0], _EPS, 1.0)
    method = f"randpair+{estimate.method}"
    return replace(estimate, theta=theta, method=method, randpair={**ratios.to_json(), **check})


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
