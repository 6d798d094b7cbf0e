"""Log lines a client or an outage can repeat at will, written at most once per interval each.

uvicorn warns once per malformed request (`Invalid HTTP request received.`, `Unsupported
upgrade request.`): one client wrote 5,000 such lines a second (a held-out review), and the
only way to quiet them, `--log-level error`, also hid the service's own warnings. A /feedback
refused while the impression log fails was logged once per call. Each such line is now written
at most once per interval, with how many like it were left out since the last one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

INTERVAL_S = 60.0


class Throttle:
    """Whether a line of a given kind may be written now, and how many were held back."""

    def __init__(self, interval_s: float = INTERVAL_S, clock: Callable[[], float] = time.monotonic):
        self.interval_s = interval_s
        self._clock = clock
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}
        self._lock = threading.Lock()  # the probe thread logs too

    def admit(self, kind: str) -> int | None:
        """None: hold this line back; else how many of its kind were held back before it."""
        now = self._clock()
        with self._lock:
            last = self._last.get(kind)
            if last is not None and now - last < self.interval_s:
                self._held[kind] = self._held.get(kind, 0) + 1
                return None
            self._last[kind] = now
            return self._held.pop(kind, 0)


def held_note(held: int, interval_s: float) -> str:
    """What a line written after `held` others like it were left out says of them."""
    if not held:
        return ""
    return f" ({held} more like it in the last {interval_s:g} s not logged)"


class ThrottleFilter(logging.Filter):
    """A logging filter passing the records whose message is one of `messages` at most once
    per interval each (the others untouched), the count of those held back added to it, and
    none of those whose message is one of `dropped`."""

    def __init__(
        self, messages: Iterable[str], interval_s: float = INTERVAL_S, dropped: Iterable[str] = ()
    ) -> None:
        super().__init__()
        self.messages = frozenset(messages)
        self.dropped = frozenset(dropped)
        self.throttle = Throttle(interval_s)

    def filter(self, record: logging.LogRecord) -> bool:
        if not isinstance(record.msg, str):
            return True
        if record.msg in self.dropped:
            return False
        if record.msg not in self.messages:
            return True
        held = self.throttle.admit(record.msg)
        if held is None:
            return False
        if held:
            record.msg = record.msg + held_note(held, self.throttle.interval_s)
        return True
