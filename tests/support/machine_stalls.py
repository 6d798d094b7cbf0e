"""Times when the whole machine stalled, so a latency test does not blame the service for them.

A shared 2-core CI machine now and then deschedules everything for hundreds of milliseconds
(seen: one 0.4 s stall during a test whose answers must come within 250 ms). A thread that
asks to sleep SLEEP_S and wakes late by more than NOTICED_S saw such a stall; a request
timed across one is excused by the stall's length, and by nothing else.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType

SLEEP_S = 0.005
NOTICED_S = 0.05


class StallWatch:
    """While open, records (start, end) of every stall it notices, in `time.perf_counter()`."""

    def __init__(self) -> None:
        self.stalls: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> StallWatch:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.is_set():
            before = time.perf_counter()
            time.sleep(SLEEP_S)
            after = time.perf_counter()
            if after - before - SLEEP_S > NOTICED_S:
                self.stalls.append((before + SLEEP_S, after))

    def stalled_during(self, start: float, end: float) -> float:
        """Seconds of noticed stalls within [start, end]."""
        return sum(max(0.0, min(end, b) - max(start, a)) for a, b in self.stalls)
