"""How late the event loop runs its callbacks: the overload signal under everything else.

A timer that should fire every LAG_SAMPLE_S measures how late it fires. `total` is the sum of
that lateness (the time the loop could not run callbacks on time: Redis deadlines subtract it,
app.features.redis_store); `recent` is its exponentially weighted mean, the time a request
that arrives now has most likely already waited before the application saw it (in the socket
and in the loop's queue), which admission control adds to its elapsed budget
(app.api.admission). Node.js services shed on the same signal (event-loop delay).
"""

from __future__ import annotations

import asyncio
import contextlib
import time

LAG_SAMPLE_S = 0.005
RECENT_WEIGHT = 0.3


class LoopLag:
    def __init__(self) -> None:
        self.total = 0.0
        self.recent = 0.0
        self.last_tick = time.monotonic()  # written by the loop, read by the probe thread
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            task, self._task = self._task, None
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + LAG_SAMPLE_S
            await asyncio.sleep(LAG_SAMPLE_S)
            late = max(loop.time() - due, 0.0)
            self.total += late
            self.recent += RECENT_WEIGHT * (late - self.recent)
            self.last_tick = time.monotonic()

    def stalled_for(self) -> float:
        """Seconds since the loop last ran the timer, beyond its period (0 when on time);
        meaningful from another thread, where the loop's own view is unavailable."""
        return max(time.monotonic() - self.last_tick - LAG_SAMPLE_S, 0.0)
