"""A clock the test moves by hand, for code that takes `clock: Callable[[], float]`
(default time.monotonic): TTLs and breaker resets pass without sleeping."""

from __future__ import annotations


class ManualClock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
