"""What the overload targets ask of the machine's CPU, from what one run of bench_overload
measured on it.

Goodput at k times the sustainable rate S (bench_overload: k = 3, target 90 %) means scoring
0.9 S requests a second and answering the other (k - 0.9) S unscored, while the load generator,
which shares the cores here, sends k S. With the CPU each kind of answer costs, measured in the
same run (a scored one on the ladder's highest passing step, where every answer is scored; an
unscored one from the overload phase, less what its scored answers cost), the target needs

    cores = 0.9 S c_scored + (k - 0.9) S c_unscored + k S c_generator

of the machine. Where that is more than the machine has, no admission policy meets the
target here. The costs are measured at lower load than 3x, and contention for the cores and
their caches only raises them (save for the split of a large request's rows over two threads,
tens of microseconds, which a shedding worker gives up). Below it, one thread can still be what
saturates: each worker's event loop (the HTTP stack, admission and shedding run there, and
under overload it holds the GIL most of the time), whose CPU in the 3x phase is reported
beside.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import psutil

OVERLOAD = 3.0  # k
TARGET_SHARE = 0.9


@dataclass(frozen=True)
class CpuUse:
    """CPU seconds used so far: the server's processes, their main threads (each worker's
    event loop) and this load generator."""

    server: float
    loops: float
    client: float

    @classmethod
    def now(cls, pid: int) -> CpuUse:
        server = loops = 0.0
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(pid)
            for proc in [root, *root.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    times = proc.cpu_times()
                    server += times.user + times.system
                    loops += _main_thread_seconds(proc)
        own = psutil.Process().cpu_times()
        return cls(server, loops, own.user + own.system)

    def __sub__(self, other: CpuUse) -> CpuUse:
        return CpuUse(
            self.server - other.server, self.loops - other.loops, self.client - other.client
        )


def _main_thread_seconds(proc: psutil.Process) -> float:
    """CPU seconds of a process's main thread (its id is the process's)."""
    for thread in proc.threads():
        if thread.id == proc.pid:
            return float(thread.user_time + thread.system_time)
    return 0.0


@dataclass(frozen=True)
class Needs:
    """What TARGET_SHARE of S at OVERLOAD x S asks for, and how busy the event loops were."""

    scored: float  # server CPU seconds per scored answer
    unscored: float  # per unscored answer (shed or over budget)
    generator: float  # the load generator's per request sent
    cores: float  # what the target needs of the machine, the load generator's included
    loops_busy: float  # the 3x phase's event-loop threads: CPU over its length, per worker

    def row(self, name: str, sustainable: float, cpus: int) -> str:
        verdict = "no: more CPU than the machine has" if self.cores > cpus else "not ruled out"
        return (
            f"| {name} | {sustainable:.0f} | {1000 * self.scored:.2f} | "
            f"{1000 * self.unscored:.2f} | {1000 * self.generator:.2f} | "
            f"**{self.cores:.2f}** of {cpus} | {self.loops_busy:.2f} | {verdict} |"
        )


TABLE_HEAD = [
    "| configuration | sustainable req/s (S) | server CPU ms per scored answer "
    "| per unscored answer at 3x | load generator per request at 3x "
    "| cores 90 % at 3x needs | each event loop's thread busy at 3x (of one core) "
    "| can the target be met here? |",
    "|---|---|---|---|---|---|---|---|",
]


def needs(
    sustainable: float,
    workers: int,
    ladder: tuple[CpuUse, int],
    overload: tuple[CpuUse, int, int, float],
) -> Needs | None:
    """ladder: the CPU used by the highest passing step and its answers (all scored);
    overload: the CPU used by the 3x phase, its scored and unscored answers, its seconds.
    None when either has nothing to divide by."""
    used, answered = ladder
    phase, scored_n, unscored_n, seconds = overload
    if sustainable <= 0 or answered == 0 or unscored_n == 0 or seconds <= 0:
        return None
    scored = used.server / answered
    unscored = max(phase.server - scored_n * scored, 0.0) / unscored_n
    generator = phase.client / (scored_n + unscored_n)
    good = TARGET_SHARE * sustainable
    rest = (OVERLOAD - TARGET_SHARE) * sustainable
    cores = good * scored + rest * unscored + OVERLOAD * sustainable * generator
    if not math.isfinite(cores):
        return None
    return Needs(scored, unscored, generator, cores, phase.loops / seconds / workers)
