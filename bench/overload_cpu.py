"""What the overload targets ask of the machine's CPU, from what one run of bench_overload
measured on it.

A phase answered at R answers a second with 90 % of the sustainable rate S scored needs

    cores = 0.9 S c_scored + (R - 0.9 S) c_unscored + R c_generator

where the load generator shares the machine's cores (as here). In the open loop at 3x,
R = 3 S. With 200 closed-loop clients, every answer within the budget + 20 ms means
R >= 200 / 0.12 s = 1,667 (Little's law: each client waits for its answer before sending
again). The costs come from the same run: a scored answer's from the ladder's highest passing
step, where every answer is scored; an unscored one's from the phase, less what its scored
answers cost; the generator's per request it sent in the phase. Where the sum is more than
the machine has, no admission policy meets the target here. The costs are measured at lower
load than the phase's, and contention for the cores and their caches only raises them (save
for the split of a large request's rows over two threads, tens of microseconds, which a
shedding worker gives up). Below it, one thread can still be what saturates: each worker's
event loop (the HTTP stack, admission and shedding run there, and under overload it holds the
GIL most of the time), whose CPU in the phase is reported beside.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import psutil

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
    """What scoring TARGET_SHARE of S asks for while a phase is answered at `rate`, and how
    busy the event loops were in it."""

    rate: float  # answers a second the phase asks for
    scored: float  # server CPU seconds per scored answer
    unscored: float  # per unscored answer (shed or over budget)
    generator: float  # the load generator's per request sent
    cores: float  # what the target needs of the machine, the load generator's included
    loops_busy: float  # the phase's event-loop threads: CPU over its length, per worker

    def row(self, name: str, sustainable: float, cpus: int) -> str:
        verdict = "no: more CPU than the machine has" if self.cores > cpus else "not ruled out"
        return (
            f"| {name} | {self.rate:,.0f} | {sustainable:.0f} | {1000 * self.scored:.2f} | "
            f"{1000 * self.unscored:.2f} | {1000 * self.generator:.2f} | "
            f"**{self.cores:.2f}** of {cpus} | {self.loops_busy:.2f} | {verdict} |"
        )


TABLE_HEAD = [
    "| phase | answers a second it asks for | sustainable req/s (S) "
    "| server CPU ms per scored answer | per unscored answer | load generator per request "
    "| cores the target needs | each event loop's thread busy (of one core) "
    "| can the target be met here? |",
    "|---|---|---|---|---|---|---|---|---|",
]


def closed_loop_rate(clients: int, bound_s: float) -> float:
    """Little's law: clients that each wait for their answer, for at most bound_s, are
    answered at least clients / bound_s times a second."""
    return clients / bound_s


def needs(
    sustainable: float,
    workers: int,
    ladder: tuple[CpuUse, int],
    phase: tuple[CpuUse, int, int, float],
    rate: float,
) -> Needs | None:
    """ladder: the CPU used by the highest passing step and its answers (all scored);
    phase: the CPU used by an overload phase, its scored and unscored answers, its seconds;
    rate: the answers a second that phase asks for. None when there is nothing to divide by."""
    used, answered = ladder
    cpu, scored_n, unscored_n, seconds = phase
    if sustainable <= 0 or answered == 0 or unscored_n == 0 or seconds <= 0:
        return None
    scored = used.server / answered
    unscored = max(cpu.server - scored_n * scored, 0.0) / unscored_n
    generator = cpu.client / (scored_n + unscored_n)
    good = TARGET_SHARE * sustainable
    cores = good * scored + max(rate - good, 0.0) * unscored + rate * generator
    if not math.isfinite(cores):
        return None
    return Needs(rate, scored, unscored, generator, cores, cpu.loops / seconds / workers)
