"""How long parsing and scoring a request of n candidate rows takes: a + b·n, fitted online.

Exponentially weighted means of n, t, n² and n·t give the least-squares line over recent
requests (old ones fade with weight (1-alpha)^k). When the recent requests all have about the
same size the slope cannot be told from the intercept: the slope is then kept (lowered only as
far as the intercept cannot absorb) and the change goes to the intercept, so a run of small
requests does not make a large one look hopeless.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MIN_SLOPE = 1e-8  # seconds per row: never free
MAX_SLOPE = 1e-2


@dataclass
class ServiceTime:
    intercept: float = 1e-3  # seconds per request
    slope: float = 20e-6  # seconds per row; a guess until requests are measured
    alpha: float = 0.2
    _n: float = field(default=0.0, init=False)
    _t: float = field(default=0.0, init=False)
    _nn: float = field(default=0.0, init=False)
    _nt: float = field(default=0.0, init=False)
    _seen: bool = field(default=False, init=False)

    @property
    def measured(self) -> bool:
        """Whether any request was observed (else the estimate is the initial guess)."""
        return self._seen

    def estimate(self, rows: int) -> float:
        return self.intercept + self.slope * rows

    def observe(self, rows: int, seconds: float) -> None:
        if not self._seen:
            self._seen = True
            self._n, self._t, self._nn, self._nt = rows, seconds, rows * rows, rows * seconds
        else:
            a = self.alpha
            self._n += a * (rows - self._n)
            self._t += a * (seconds - self._t)
            self._nn += a * (rows * rows - self._nn)
            self._nt += a * (rows * seconds - self._nt)
        variance = self._nn - self._n * self._n
        if variance > (0.1 * self._n) ** 2 + 1.0:  # sizes differ enough to see the slope
            slope = (self._nt - self._n * self._t) / variance
            self.slope = min(max(slope, MIN_SLOPE), MAX_SLOPE)
        elif self._n > 0:  # the intercept cannot go below zero: then the rows got cheaper
            self.slope = max(min(self.slope, self._t / self._n), MIN_SLOPE)
        self.intercept = max(self._t - self.slope * self._n, 0.0)
