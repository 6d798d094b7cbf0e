"""After a burst, give the C heap's free memory back to the system.

glibc keeps memory a process frees inside its main heap unless it lies at the heap's top, and
raises its mmap threshold to the largest block freed, so later megabyte request bodies come
from that heap too. A worker flooded with 2.4 MB bodies kept 2.6-2.9 GB of RSS after the flood
(a held-out trial: 1,062 MB three seconds after a 3x flood), nearly all of it free:
malloc_trim(0) gave back all but 430 MB. So once the worker is quiet (no answer sent and under
QUIET_CPU_SHARE of a core over a check interval) and glibc holds more than TRIM_ABOVE_BYTES
free (mallinfo2), malloc_trim(0) runs in a thread. It locks the heap while it walks it
(milliseconds), which would stall a request's allocations: hence only when no request is being
answered. Linux with glibc 2.33 or later only; elsewhere nothing runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import sys
import time
from collections.abc import Callable

from app import metrics

log = logging.getLogger(__name__)

CHECK_EVERY_S = 2.0
QUIET_CPU_SHARE = 0.05
TRIM_ABOVE_BYTES = 64 * 2**20
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class _MallInfo2(ctypes.Structure):  # struct mallinfo2 (malloc.h, glibc 2.33)
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",  # free bytes the allocator holds
            "keepcost",
        )
    ]


class Heap:
    """glibc's malloc_trim and the free bytes it could give back (mallinfo2)."""

    def __init__(self, libc: ctypes.CDLL) -> None:
        self._trim = libc.malloc_trim
        self._trim.argtypes, self._trim.restype = [ctypes.c_size_t], ctypes.c_int
        self._info = libc.mallinfo2
        self._info.argtypes, self._info.restype = [], _MallInfo2

    def free_bytes(self) -> int:
        return int(self._info().fordblks)

    def trim(self) -> None:
        self._trim(0)


def glibc_heap() -> Heap | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return Heap(ctypes.CDLL("libc.so.6"))
    except (OSError, AttributeError):  # musl, or a glibc before mallinfo2
        return None


def rss_bytes() -> int:
    """This process's resident set, from /proc (0 where there is none)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


def answers_sent() -> float:
    """The answers this process has counted (app.metrics), every route and status."""
    return sum(
        sample.value
        for metric in metrics.REQUESTS.collect()
        for sample in metric.samples
        if sample.name == "ltr_http_requests_total"
    )


def _cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


async def trim_when_quiet(
    heap: Heap | None = None,
    every: float = CHECK_EVERY_S,
    cpu: Callable[[], float] = _cpu_seconds,
    answered: Callable[[], float] = answers_sent,
) -> None:
    """Run until cancelled: each `every` seconds, trim the heap if the process sent no answer
    and used under QUIET_CPU_SHARE of a core since the last check, the allocator holds more
    than TRIM_ABOVE_BYTES free, and it has answered since its last trim (once per burst)."""
    heap = heap or glibc_heap()
    if heap is None:
        return
    used, sent = cpu(), answered()
    # The answer count at the last trim. A trim leaves the free chunks in glibc's count
    # (mallinfo2 counts the pages it gave back as free still), so without this an idle worker
    # trimmed again at every check, logging a line each time (a held-out trial: 29 lines a
    # minute, RSS 300 -> 300 MB).
    trimmed_at: float | None = None
    while True:
        await asyncio.sleep(every)
        now_used, now_sent = cpu(), answered()
        quiet = now_used - used < QUIET_CPU_SHARE * every and now_sent == sent
        used, sent = now_used, now_sent
        if not quiet or sent == trimmed_at or heap.free_bytes() < TRIM_ABOVE_BYTES:
            continue
        trimmed_at = sent
        with contextlib.suppress(Exception):  # best effort: memory, not correctness
            before, started = rss_bytes(), time.perf_counter()
            await asyncio.to_thread(heap.trim)
            took = time.perf_counter() - started
            log.info(
                "heap trimmed after a burst: RSS %d -> %d MB in %.0f ms",
                before >> 20,
                rss_bytes() >> 20,
                took * 1e3,
            )
        used = cpu()  # the trim's own time is not the worker's
