"""The heap trimmer: only when the worker answers nothing and idles, and only when glibc holds
enough free memory to give back."""

from __future__ import annotations

import asyncio
import sys

import pytest

from app.heap_trim import TRIM_ABOVE_BYTES, glibc_heap, rss_bytes, trim_when_quiet

MB = 2**20


class Worker:
    """A fake worker going through `phases`, one per check: (busy, bytes free in its heap).
    Busy: it burns a second of CPU and answers a request per check."""

    def __init__(self, phases: list[tuple[bool, int]], trim_keeps_count: bool = False) -> None:
        self.phases = phases
        # glibc's own way: a trim gives pages back but mallinfo2 still counts them free.
        self.trim_keeps_count = trim_keeps_count
        self.checks = 0
        self.cpu_used = 0.0
        self.sent = 0
        self.trims: list[int] = []
        self.trimmed = False

    def _phase(self) -> tuple[bool, int]:
        """The phase of the check under way (the first is the trimmer's start)."""
        return self.phases[min(max(self.checks - 1, 0), len(self.phases) - 1)]

    def free_bytes(self) -> int:
        return 0 if self.trimmed else self._phase()[1]

    def trim(self) -> None:
        self.trims.append(self.free_bytes())
        self.trimmed = not self.trim_keeps_count

    def cpu(self) -> float:
        self.checks += 1
        if self._phase()[0]:
            self.cpu_used += 1.0
            self.sent += 1
            self.trimmed = False  # a burst frees memory again
        return self.cpu_used

    def answered(self) -> float:
        return float(self.sent)

    def run(self) -> list[int]:
        async def main() -> None:
            task = asyncio.create_task(trim_when_quiet(self, 0.001, self.cpu, self.answered))  # type: ignore[arg-type]
            await asyncio.sleep(0.1)
            task.cancel()

        asyncio.run(main())
        return self.trims


FREED = TRIM_ABOVE_BYTES + MB


def test_trims_once_quiet_after_a_burst() -> None:
    assert Worker([(False, 0), (True, FREED), (False, FREED)]).run() == [FREED]


def test_never_while_busy() -> None:
    assert Worker([(False, 0), (True, FREED)]).run() == []


def test_never_while_answering_even_on_little_cpu() -> None:
    """Requests at a low rate: a trim would stall one (the heap locked for milliseconds)."""
    worker = Worker([(False, FREED)])
    answers = iter(range(1, 10_000))
    worker.answered = lambda: float(next(answers))  # type: ignore[method-assign]
    assert worker.run() == []


def test_never_for_little_free_memory() -> None:
    assert Worker([(False, 0), (True, MB), (False, MB)]).run() == []


def test_each_burst_is_trimmed_once() -> None:
    phases = [(False, 0), (True, FREED), (False, FREED), (False, FREED), (True, FREED)]
    assert Worker([*phases, (False, FREED)]).run() == [FREED, FREED]


def test_an_idle_worker_is_not_trimmed_again_while_glibc_still_counts_the_bytes_free() -> None:
    """A held-out trial's idle worker trimmed (and logged it) every check for a minute."""
    idle = [(False, FREED)] * 20
    phases = [(False, 0), (True, FREED), *idle, (True, FREED), *idle]
    assert Worker(phases, trim_keeps_count=True).run() == [FREED, FREED]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_the_real_heap_is_read_and_trimmed() -> None:
    heap = glibc_heap()
    assert heap is not None and heap.free_bytes() >= 0
    heap.trim()
    assert rss_bytes() > 10 * MB
