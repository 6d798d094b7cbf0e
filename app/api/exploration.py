"""Exploration for position-bias estimation: on a share of answers, swap the first result with
one drawn uniformly from positions 2..depth (RandPair; Wang et al. 2018, "Position bias
estimation for unbiased learning to rank in personal search").

Logs of one fixed ranker show each document of a query at one position, so the estimator
cannot tell a position being seen less from its documents being worth less (docs/
POSITION_BIAS.md). A swap shows the same two documents at both positions, which identifies
theta_k / theta_1 and costs the user only on the answers explored. The swapped position is
logged with the impression (`explored`) and the answer's reasons say `explored`.
"""

from __future__ import annotations

import numpy as np
from prometheus_client import Counter

EXPLORED = "explored"

EXPLORED_ANSWERS = Counter(
    "ltr_explored_answers_total",
    "Answers whose first result was swapped with a lower one for position-bias estimation.",
    ["model"],
)


class Exploration:
    """Draws which answers to explore and where; one per worker (its own random stream)."""

    def __init__(self, share: float, depth: int, rng: np.random.Generator | None = None) -> None:
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"exploration share must be in [0, 1], got {share}")
        if depth < 2:
            raise ValueError(f"exploration depth must be at least 2, got {depth}")
        self.share = share
        self.depth = depth
        self.rng = rng if rng is not None else np.random.default_rng()

    def swap(self, order: np.ndarray) -> int | None:
        """On a `share` of calls, swaps `order[0]` (int64 [k], the results best first) in
        place with the result at a position drawn uniformly from 2..min(depth, k); that
        position (1-based), else None. A list of one result is never explored."""
        last = min(self.depth, order.shape[0])
        if self.share <= 0.0 or last < 2 or self.rng.random() >= self.share:
            return None
        position = int(self.rng.integers(2, last + 1))
        order[0], order[position - 1] = order[position - 1], order[0]
        return position
