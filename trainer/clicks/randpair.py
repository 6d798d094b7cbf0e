"""Examination ratios from explored answers (RandPair; Wang et al. 2018, "Position bias
estimation for unbiased learning to rank in personal search", section 3.2).

An explored answer (app/api/exploration.py) showed the ranker's first result at position k and
its k-th result first. Which answers are explored is drawn at random, so the ranker's first
result is the same kind of document at position 1 (unexplored answers) and at position k
(answers explored at k), and likewise its k-th. Under the position-based model:

    E[click on the first at k] = theta_k g1     E[click on the first at 1] = theta_1 g1
    E[click on the k-th at k]  = theta_k gk     E[click on the k-th at 1]  = theta_1 gk

so theta_k / theta_1 = (A + D) / (B + C), with A, C the click rates at positions k and 1 of the
answers explored at k and D, B those at positions k and 1 of the unexplored answers at least k
long. No relevance model is fitted: what a logging ranker saw and the logs lack cannot bias it,
as it does EM on one fixed ranker's logs (docs/POSITION_BIAS.md). But it rests on the few
explored answers, so it is noisier than EM where EM is unbiased: each ratio carries its
standard error (the delta method over the four means), and `consistent` tests EM's theta
against the ratios, so that EM is kept where the swaps do not contradict it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RandPairRatios:
    theta: np.ndarray  # float64 [K], theta_k / theta_1 (theta[0] = 1); NaN where not estimated
    se: np.ndarray  # float64 [K], the standard error of each ratio (0 at position 1)
    answers: np.ndarray  # int64 [K], answers explored at each position (0 at position 1)
    clicks: np.ndarray  # int64 [K], clicks on the two swapped results of those answers

    def estimated_prefix(self) -> int:
        """How many leading positions (1, 2, ...) have a ratio: positions past the first one
        without enough clicks are left to the other estimate."""
        missing = np.flatnonzero(np.isnan(self.theta))
        return int(missing[0]) if missing.size else int(self.theta.size)

    def consistent(self, theta: np.ndarray) -> tuple[bool, float, int]:
        """Whether `theta` (another estimate, theta[0] = 1) agrees with the ratios at their
        positions: (agrees, chi-square, degrees of freedom), at the 1 % level."""
        known = min(self.estimated_prefix(), theta.size)
        z = (theta[1:known] - self.theta[1:known]) / np.maximum(self.se[1:known], 1e-12)
        dof = max(known - 1, 1)
        chi_square = float(np.sum(z**2))
        return chi_square <= chi_square_critical(dof), chi_square, dof

    def to_json(self) -> dict[str, object]:
        known = self.estimated_prefix()
        return {
            "positions": known,
            "ratios": [round(float(t), 6) for t in self.theta[:known]],
            "standard_errors": [round(float(e), 6) for e in self.se[:known]],
            "explored_answers": self.answers.tolist(),
            "explored_clicks": self.clicks.tolist(),
        }


def chi_square_critical(dof: int, z: float = 2.326) -> float:
    """The chi-square quantile at the normal quantile `z` (2.326: the 1 % level), by Wilson
    and Hilferty's cube-root approximation (1931), within about 1 % from 3 degrees up."""
    h = 2.0 / (9.0 * dof)
    return float(dof * (1.0 - h + z * np.sqrt(h)) ** 3)


def _ratio_se(x: np.ndarray, y: np.ndarray, u: np.ndarray, v: np.ndarray) -> tuple[float, float]:
    """(N / M, its standard error) for N = mean(x) + mean(u), M = mean(y) + mean(v), with x, y
    from the explored answers and u, v from the unexplored ones (each pair from the same
    answers, so correlated), by the delta method."""
    ne, nu = x.size, u.size
    n, m = x.mean() + u.mean(), y.mean() + v.mean()
    var_n = x.var() / ne + u.var() / nu
    var_m = y.var() / ne + v.var() / nu
    cov = (
        np.mean((x - x.mean()) * (y - y.mean())) / ne
        + np.mean((u - u.mean()) * (v - v.mean())) / nu
    )
    ratio = n / m
    var = ratio**2 * (var_n / max(n, 1e-12) ** 2 + var_m / m**2 - 2 * cov / (max(n, 1e-12) * m))
    return float(ratio), float(np.sqrt(max(var, 0.0)))


def randpair_ratios(
    positions: np.ndarray,
    clicks: np.ndarray,
    group_offsets: np.ndarray,
    explored: np.ndarray,
    min_clicks: int,
) -> RandPairRatios:
    """positions int [n] (1-based, served), clicks 0/1 [n], group_offsets int64 [n_lists + 1],
    explored int64 [n_lists] (0 = not explored, else the position swapped with the first). A
    position's ratio needs `min_clicks` clicks on the two swapped results of its explored
    answers, and unexplored answers at least that long with a click at position 1 or k."""
    sizes = np.diff(group_offsets)
    list_of_row = np.repeat(np.arange(sizes.size), sizes)
    first = np.zeros(sizes.size)
    at_first = positions == 1
    first[list_of_row[at_first]] = clicks[at_first]
    top = int(explored.max(initial=0))
    theta = np.full(max(top, 1), np.nan)
    theta[0] = 1.0
    se = np.zeros(theta.size)
    answers = np.zeros(theta.size, dtype=np.int64)
    counted = np.zeros(theta.size, dtype=np.int64)
    for k in range(2, top + 1):
        at_k = positions == k
        lists = list_of_row[at_k]
        click_k = np.zeros(sizes.size)
        click_k[lists] = clicks[at_k]
        swapped = explored == k
        plain = np.zeros(sizes.size, dtype=bool)
        plain[lists] = True
        plain &= explored == 0
        answers[k - 1] = int(swapped.sum())
        counted[k - 1] = int(click_k[swapped].sum() + first[swapped].sum())
        if counted[k - 1] < min_clicks or not plain.any():
            continue
        if first[swapped].sum() + first[plain].sum() > 0:
            theta[k - 1], se[k - 1] = _ratio_se(
                click_k[swapped], first[swapped], click_k[plain], first[plain]
            )
    return RandPairRatios(theta, se, answers, counted)
