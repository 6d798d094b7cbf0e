"""The heap trimmer: only when the worker is quiet and has grown, and not again for what a trim
could not give back."""

from __future__ import annotations

import asyncio
import sys

import pytest

from app import heap_trim
from app.heap_trim import TRIM_ABOVE_BYTES, rss_bytes, trim_when_quiet

MB = 2**20


class Worker:
    """A fake worker: its RSS, the CPU it burns per check, and the trims it got."""

    def __init__(self, rss: int, busy: bool) -> None:
        self.start_rss = 300 * MB
        self.grown = rss
        self.busy = busy
        self.cpu_used = 0.0
        self.checks = 0
        self.trims: list[int] = []
        self.left = 300 * MB  # what a trim leaves

    def rss(self) -> int:
        if self.checks == 0:
            return self.start_rss
        return self.left if self.trims else self.grown

    def cpu(self) -> float:
        self.checks += 1
        self.cpu_used += 1.0 if self.busy else 0.0
        return self.cpu_used

    def trim(self, _: int) -> int:
        self.trims.append(self.rss())
        return 1

    def run(self) -> list[int]:
        async def main() -> None:
            task = asyncio.create_task(trim_when_quiet(0.001, self.rss, self.cpu, self.trim))
            await asyncio.sleep(0.1)
            task.cancel()

        asyncio.run(main())
        return self.trims


def test_trims_once_quiet_after_growing() -> None:
    grown = 300 * MB + TRIM_ABOVE_BYTES + MB
    assert Worker(grown, busy=False).run() == [grown]


def test_never_while_busy() -> None:
    assert Worker(300 * MB + 2 * TRIM_ABOVE_BYTES, busy=True).run() == []


def test_never_when_not_grown() -> None:
    assert Worker(300 * MB + MB, busy=False).run() == []


def test_what_a_trim_left_is_the_new_baseline() -> None:
    """A worker whose RSS stays up (a larger model) is trimmed once, not at every check."""
    worker = Worker(300 * MB + 2 * TRIM_ABOVE_BYTES, busy=False)
    worker.left = worker.grown  # the trim gave nothing back
    assert len(worker.run()) == 1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_the_real_trim_runs_and_rss_is_read() -> None:
    trim = heap_trim._malloc_trim()
    assert trim is not None and trim(0) in (0, 1)
    assert rss_bytes() > 10 * MB
