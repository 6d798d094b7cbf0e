"""What a row costs each scorer to score, lately: the figure that decides whether a second
thread pays for its hand-off (~0.1 ms to wake a pooled thread). The same 300 rows of a
300-tree model score in 0.09 ms on one machine (AVX-512) and 0.8 ms on another (Zen 1's
128-bit AVX2 units), so no fixed row count decides it well on both.
"""

from __future__ import annotations

import threading
import weakref

SMOOTHING = 0.2  # weight of the newest observation in the moving average


class ScoringCost:
    """Seconds per row, an exponentially weighted moving average per scorer object (forgotten
    with the scorer: a model version swapped out takes its figure along)."""

    def __init__(self) -> None:
        self._per_row: weakref.WeakKeyDictionary[object, float] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def observe(self, scorer: object, rows: int, seconds: float) -> None:
        if rows <= 0 or seconds < 0:
            return
        per_row = seconds / rows
        with self._lock:
            try:
                last = self._per_row.get(scorer)
                self._per_row[scorer] = (
                    per_row if last is None else last + SMOOTHING * (per_row - last)
                )
            except TypeError:  # a scorer that cannot be weakly referenced goes unmeasured
                return

    def expected(self, scorer: object, rows: int) -> float:
        """Seconds `rows` should take `scorer`; 0.0 before its first scoring."""
        with self._lock:
            try:
                per_row = self._per_row.get(scorer)
            except TypeError:
                return 0.0
        return 0.0 if per_row is None else per_row * rows


SCORING_COST = ScoringCost()
