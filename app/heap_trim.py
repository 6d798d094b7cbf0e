"""After a burst, give the C heap's free memory back to the system.

glibc keeps memory a process frees inside its main heap unless it lies at the heap's top, and
raises its mmap threshold to the largest block freed, so later megabyte request bodies come
from that heap too. A worker flooded with 2.4 MB bodies kept 2.6-2.9 GB of RSS after the flood
(a held-out trial: 1,062 MB three seconds after a 3x flood), nearly all of it free:
malloc_trim(0) gave back all but 430 MB. So once the worker is quiet (under QUIET_CPU_SHARE of
a core over a check interval) and its RSS is TRIM_ABOVE_BYTES over what it was when it started
serving, malloc_trim(0) runs in a thread. It locks the heap while it walks it (milliseconds),
hence only when quiet. Linux with glibc only; elsewhere nothing runs.
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

log = logging.getLogger(__name__)

CHECK_EVERY_S = 2.0
QUIET_CPU_SHARE = 0.05
TRIM_ABOVE_BYTES = 64 * 2**20
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # musl and others have none
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def rss_bytes() -> int:
    """This process's resident set, from /proc (0 where there is none)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


def _cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


async def trim_when_quiet(
    every: float = CHECK_EVERY_S,
    rss: Callable[[], int] = rss_bytes,
    cpu: Callable[[], float] = _cpu_seconds,
    trim: Callable[[int], int] | None = None,
) -> None:
    """Run until cancelled: each `every` seconds, trim the heap if the process used under
    QUIET_CPU_SHARE of a core since the last check and its RSS grew by TRIM_ABOVE_BYTES since
    the start (or since what the last trim left)."""
    trim = trim or _malloc_trim()
    if trim is None:
        return
    baseline = rss()
    used = cpu()
    while True:
        await asyncio.sleep(every)
        now_used = cpu()
        quiet = now_used - used < QUIET_CPU_SHARE * every
        used = now_used
        before = rss()
        if not quiet or before - baseline < TRIM_ABOVE_BYTES:
            continue
        with contextlib.suppress(Exception):  # best effort: memory, not correctness
            started = time.perf_counter()
            await asyncio.to_thread(trim, 0)
            took = time.perf_counter() - started
            after = rss()
            log.info(
                "heap trimmed after a burst: RSS %d -> %d MB in %.0f ms",
                before >> 20,
                after >> 20,
                took * 1e3,
            )
            # What the trim left is the new normal (a larger model, caches filled): trimmed
            # again only past it, not at every quiet check.
            baseline = max(baseline, after)
        used = cpu()  # the trim's own time is not the worker's
