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
as it does EM on one fixed ranker's logs (docs/POSITION_BIAS.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RandPairRatios:
    theta: np.ndarray  # float64 [K], theta_k / theta_1 (theta[0] = 1); NaN where not estimated
    answers: np.ndarray  # int64 [K], answers explored at each position (0 at position 1)
    clicks: np.ndarray  # int64 [K], clicks on the two swapped results of those answers

    def estimated_prefix(self) -> int:
        """How many leading positions (1, 2, ...) have a ratio: positions past the first one
        without enough clicks are left to the other estimate."""
        missing = np.flatnonzero(np.isnan(self.theta))
        return int(missing[0]) if missing.size else int(self.theta.size)

    def to_json(self) -> dict[str, object]:
        return {
            "positions": self.estimated_prefix(),
            "explored_answers": self.answers.tolist(),
            "explored_clicks": self.clicks.tolist(),
        }


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
        a, c = click_k[swapped].mean(), first[swapped].mean()
        d, b = click_k[plain].mean(), first[plain].mean()
        if b + c > 0:
            theta[k - 1] = (a + d) / (b + c)
    return RandPairRatios(theta, answers, counted)
