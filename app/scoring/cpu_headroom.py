"""How many cores sat idle lately: whether splitting a request over a second scoring thread
would shorten it (an idle core) or only add a hand-off (every core busy, as under load or with
one worker per core).

Two readings, the smaller wins: the machine's idle time (Linux's /proc/stat), and, in a
container with a CPU limit (cgroup v2 `cpu.max`, as Kubernetes sets it), the limit less what
the container used (`cpu.stat`): on a 64-core node a pod limited to 2 cores has no spare core
once its workers use 2, however idle the node. Read at most every SAMPLE_INTERVAL_S, lazily by
the scoring calls themselves (about 50 us a read); where neither file exists no core is ever
reported idle. Threads may race on a sample: the worst case is one read too many.

Averaged over a quarter of a second, an idle core is hidden by work that does not overlap
the scoring: a single client's request is parsed in one thread, then scored, while the client
waits, and the average says "half a core idle" at the moment both are. `idle_now()` is the
other reading: the cores not running anything this instant (the kernel's count of runnable
threads, /proc/loadavg).
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

SAMPLE_INTERVAL_S = 0.25


class CpuHeadroom:
    def __init__(
        self,
        stat: str = "/proc/stat",
        cgroup: str = "/sys/fs/cgroup",
        loadavg: str = "/proc/loadavg",
    ) -> None:
        self.stat = stat
        self.loadavg = loadavg
        self.cgroup = Path(cgroup)
        self.cores = os.cpu_count() or 1
        self._machine: tuple[float, float] | None = None  # (idle, all) jiffies at the last read
        self._container: tuple[float, float] | None = None  # (used µs, monotonic s) last read
        self._sampled_at = -math.inf
        self._spare = 0.0

    def spare_cores(self, now: float | None = None) -> float:
        """Idle cores over the interval before the last sample."""
        now = time.monotonic() if now is None else now
        if now - self._sampled_at >= SAMPLE_INTERVAL_S:
            self._sampled_at = now
            self._spare = min(self._machine_spare(), self._container_spare(now))
        return self._spare

    def idle_now(self) -> float:
        """Cores with nothing runnable on them now, besides the calling thread (0 where the
        kernel does not tell)."""
        try:
            with open(self.loadavg, "rb") as loadavg:
                running = int(loadavg.read().split()[3].split(b"/")[0])
        except (OSError, ValueError, IndexError):
            return 0.0
        return float(max(self.cores - running, 0))

    def _machine_spare(self) -> float:
        times = _cpu_times(self.stat)
        last, self._machine = self._machine, times
        if times is None or last is None:
            return 0.0
        idle, total = times[0] - last[0], times[1] - last[1]
        return self.cores * idle / total if total > 0 else 0.0

    def _container_spare(self, now: float) -> float:
        limit = _cpu_limit(self.cgroup / "cpu.max")
        if limit is None:
            return math.inf  # no limit: the machine's reading decides
        used = _cpu_used_us(self.cgroup / "cpu.stat")
        last = self._container
        self._container = None if used is None else (used, now)
        if used is None or last is None or now <= last[1]:
            return 0.0
        busy = (used - last[0]) / 1e6 / (now - last[1])
        return max(limit - busy, 0.0)


def _cpu_times(path: str) -> tuple[float, float] | None:
    """(idle + iowait, all) jiffies of every core together, or None off Linux."""
    try:
        with open(path, "rb") as stat:
            fields = stat.readline().split()
    except OSError:
        return None
    if len(fields) < 5 or fields[0] != b"cpu":
        return None
    # user nice system idle iowait irq softirq steal (guest time is already in user and nice)
    values = [float(v) for v in fields[1:9]]
    return values[3] + values[4], sum(values)


def _cpu_limit(path: Path) -> float | None:
    """Cores the cgroup may use (`cpu.max`: "QUOTA PERIOD" or "max PERIOD"), None unlimited."""
    try:
        quota, period = path.read_text().split()[:2]
        return None if quota == "max" else float(quota) / float(period)
    except (OSError, ValueError):
        return None


def _cpu_used_us(path: Path) -> float | None:
    try:
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return float(value)
    except (OSError, ValueError):
        return None
    return None


def usable_cores(cgroup: str = "/sys/fs/cgroup") -> float:
    """The cores this process may use: the machine's, or its container's CPU limit if lower."""
    cores = float(os.cpu_count() or 1)
    limit = _cpu_limit(Path(cgroup) / "cpu.max")
    return cores if limit is None else min(cores, limit)


HEADROOM = CpuHeadroom()
