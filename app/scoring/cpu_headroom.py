"""How many of the machine's cores sat idle lately: whether splitting a request over a second
scoring thread would shorten it (an idle core) or only add a hand-off (every core busy, as
under load or with one worker per core).

Read from Linux's /proc/stat at most every SAMPLE_INTERVAL_S, lazily by the scoring calls
themselves (~10 us a read); elsewhere no core is ever reported idle. Threads may race on a
sample: the worst case is one read too many.
"""

from __future__ import annotations

import os
import time

SAMPLE_INTERVAL_S = 0.25
_STAT = "/proc/stat"


class CpuHeadroom:
    def __init__(self, path: str = _STAT, clock: float | None = None) -> None:
        self.path = path
        self.cores = os.cpu_count() or 1
        self._last: tuple[float, float] | None = None  # (idle, total) jiffies at the last read
        self._sampled_at = -float("inf") if clock is None else clock
        self._spare = 0.0

    def spare_cores(self, now: float | None = None) -> float:
        """Idle cores (0..cores) over the interval before the last sample."""
        now = time.monotonic() if now is None else now
        if now - self._sampled_at >= SAMPLE_INTERVAL_S:
            self._sampled_at = now
            self._sample()
        return self._spare

    def _sample(self) -> None:
        times = _cpu_times(self.path)
        if times is None:
            self._spare = 0.0
            return
        last, self._last = self._last, times
        if last is None:
            return
        idle, total = times[0] - last[0], times[1] - last[1]
        self._spare = self.cores * idle / total if total > 0 else 0.0


def _cpu_times(path: str) -> tuple[float, float] | None:
    """(idle + iowait, all) jiffies of every core together, or None off Linux."""
    try:
        with open(path, "rb") as stat:
            fields = stat.readline().split()
    except OSError:
        return None
    if len(fields) < 5 or fields[0] != b"cpu":
        return None
    values = [float(v) for v in fields[1:]]
    # user nice system idle iowait irq softirq steal guest guest_nice: guest time is already
    # counted in user and nice.
    counted = values[:8]
    return values[3] + (values[4] if len(values) > 4 else 0.0), sum(counted)


HEADROOM = CpuHeadroom()
