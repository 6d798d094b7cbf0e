"""What /livez and /readyz answer, for the routes on the service's port and for the probe
listener (app.probe_server) alike.

Liveness fails only when the event loop has not run for `livez_max_loop_stall_seconds`: a
worker that is merely loaded answers late but is alive, and restarting it would move its load
onto the other pods (a cascade). Readiness is a model loaded and warmed, the compiled body scans
and item lookup loaded (or failed: the full decode and the numpy paths serve), and (optionally)
not shedding, so a load balancer moves traffic away from a worker that sheds.
"""

from __future__ import annotations

from typing import Any

from app.api.admission import AdmissionController
from app.kernel_warmup import service_kernels
from app.loop_lag import LoopLag
from app.registry import NOTHING_LOADED, ModelRegistry
from app.settings import Settings

Answer = tuple[int, dict[str, Any]]


def liveness(loop_lag: LoopLag, settings: Settings) -> Answer:
    stalled = loop_lag.stalled_for()
    if stalled > settings.livez_max_loop_stall_seconds:
        detail = f"the event loop has not run for {stalled:.1f} s"
        return 503, {"status": "stalled", "detail": detail}
    return 200, {"status": "ok"}


def readiness(
    registry: ModelRegistry | None, admission: AdmissionController, settings: Settings
) -> Answer:
    if registry is not None and registry.ready:
        if settings.body_scan and not all(kernel.settled for kernel in service_kernels()):
            # Their load holds the GIL in spurts for a second or two (a cold compile: longer):
            # ready is when requests see steady latency. 1,000-candidate requests sent while
            # they loaded took up to 134 ms against 5-6 ms once they were in (one client).
            return 503, {"status": "not ready", "detail": "loading the compiled body scans"}
        if settings.readyz_reports_shedding and admission.shedding:
            return 503, {"status": "shedding", "detail": "shedding load: send less"}
        return 200, {"status": "ready"}
    errors = registry.errors() if registry is not None else {}
    detail = "; ".join(f"{k}: {v}" for k, v in sorted(errors.items()))
    if not detail:
        detail = registry.why_none() if registry is not None else NOTHING_LOADED
    return 503, {"status": "not ready", "detail": detail}
