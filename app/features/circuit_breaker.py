"""A circuit breaker: stop calling a dependency that keeps failing, probe it again later.

closed → (N consecutive failures) → open → (reset seconds) → half-open: one probe call is let
through; its success closes the breaker, its failure opens it for another reset period.

Failures count once per stall, not once per call: calls that were in flight together when one
failure was counted (they started before it) fail for the same reason, and counting each of
them let one stall of a saturated machine (8 concurrent requests' lookups timing out at once)
open the breaker although Redis answered every other call. So N consecutive failures mean N
stalls one after another, each seen by a call that began after the previous one was counted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

State = Literal["closed", "open", "half_open"]


class CircuitBreaker:
    """Not thread-safe: meant for one asyncio event loop, where calls do not interleave."""

    def __init__(
        self,
        failure_threshold: int,
        reset_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if failure_threshold < 1:
            raise ValueError("failure_threshold must be >= 1")
        if reset_seconds <= 0:
            raise ValueError("reset_seconds must be > 0")
        self.failure_threshold = failure_threshold
        self.reset_seconds = reset_seconds
        self._clock = clock
        self._failures = 0
        self._last_counted: float | None = None  # when the last failure was counted
        self._opened_at: float | None = None
        self._probe_started: float | None = None

    @property
    def state(self) -> State:
        if self._opened_at is None:
            return "closed"
        if self._clock() - self._opened_at >= self.reset_seconds:
            return "half_open"
        return "open"

    def open_left(self) -> float:
        """Seconds until the breaker lets a probe through (0 when closed or half-open)."""
        if self._opened_at is None:
            return 0.0
        return max(self._opened_at + self.reset_seconds - self._clock(), 0.0)

    def allow(self) -> bool:
        """Whether a call may go out now; in half-open state only one probe at a time does."""
        state = self.state
        if state == "closed":
            return True
        if state == "open":
            return False
        now = self._clock()
        # A probe whose caller vanished without reporting must not wedge the breaker half-open.
        if self._probe_started is not None and now - self._probe_started < self.reset_seconds:
            return False
        self._probe_started = now
        return True

    def now(self) -> float:
        """The breaker's clock: what `record_failure` takes as a call's start."""
        return self._clock()

    def record_success(self) -> None:
        self._failures = 0
        self._last_counted = None
        self._opened_at = None
        self._probe_started = None

    def release_probe(self) -> None:
        """A call ended without telling whether the dependency is healthy: another may probe."""
        self._probe_started = None

    def record_failure(self, started: float | None = None) -> None:
        """A call failed; `started` (the breaker's clock when it began), if given, lets a call
        that overlapped an already counted failure share its count."""
        self._probe_started = None
        now = self._clock()
        last = self._last_counted
        if started is None or last is None or started >= last:  # not one counted already
            self._failures += 1
            self._last_counted = now
        if self._opened_at is not None or self._failures >= self.failure_threshold:
            self._opened_at = now
