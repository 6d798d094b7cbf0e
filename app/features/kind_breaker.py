"""A circuit breaker for one kind of Redis call (the item store's batches), beside the shared one.

The shared breaker (app.features.redis_store) opens when Redis fails call after call. A slow
link that times out only the large calls (a 1,000-item batch is half a megabyte) while the
small ones (user features, pointer reads) answer never opened it: each small success reset its
count, and every item request waited out the whole deadline (a held-out trial: a proxy adding
3 ms per chunk, 6 s of item lookups timing out at 10 ms, the breaker closed throughout). This
one counts the kind's own stalls, the same way (app.features.circuit_breaker); open, the kind's
calls are refused at once (the item store answers from the snapshot) until its reset period
has passed and one of them probes. No PING probes it: a PING is not the kind of call that fails.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from app import metrics
from app.features.circuit_breaker import CircuitBreaker

log = logging.getLogger("app.features.redis_store")  # beside the shared breaker's lines

OPEN = metrics.worker_gauge(
    "ltr_redis_kind_circuit_open",
    "1 while this worker's breaker for one kind of Redis call (`kind`: item_batches) is open "
    "while the shared one may not be: those calls fail where others answer (a slow link "
    "times out large batches); the item store answers from the snapshot meanwhile.",
    ("kind",),
)


class KindBreaker:
    def __init__(
        self,
        kind: str,
        failure_threshold: int,
        reset_seconds: float,
        clock: Callable[[], float],
    ) -> None:
        self.kind = kind
        self.breaker = CircuitBreaker(failure_threshold, reset_seconds, clock)

    def record(self, success: bool, started: float | None = None) -> None:
        """A call of this kind answered (`success`) or failed (it began at `started`)."""
        before = self.breaker.state
        if success:
            self.breaker.record_success()
        else:
            self.breaker.record_failure(started)
        after = self.breaker.state
        if before == "closed" and after == "open":
            log.warning(
                "redis %s: circuit breaker opened (%d in a row timed out or failed, whatever "
                "other calls did): none sent for %g s, then one probe",
                self.kind,
                self.breaker.failure_threshold,
                self.breaker.reset_seconds,
            )
            OPEN.labels(self.kind).set(1)
        elif before != "closed" and after == "closed":
            log.warning("redis %s: circuit breaker closed: those calls resume", self.kind)
            OPEN.labels(self.kind).set(0)
