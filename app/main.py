"""The FastAPI application: `create_app()` and its lifespan.

Run with `uvicorn app.main:create_app --factory` (each worker builds its own app from `LTR_*`
variables), `python -m app`, or `ltr serve`. The lifespan opens the user-feature resolver
(Redis pool, if configured), then loads every model in the background: `/livez` answers at
once, `/readyz` says 503 until a model is loaded and warmed. A worker that replaces another
while its siblings serve (app.supervisor) loads them before it starts accepting instead. The
lifespan also runs the reload triggers: the filesystem poll and, with Redis, the
`{prefix}events` listener.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import anyio
from fastapi import FastAPI

from app import metrics
from app.api.admission import AdmissionController, Shed
from app.api.direct_rerank import DirectRerank
from app.api.docs_pages import install_offline_docs
from app.api.early_admission import admit_rerank, release_slot
from app.api.errors import install_error_handlers
from app.api.exploration import Exploration
from app.api.feedback_routes import FeedbackRequest, feedback_router
from app.api.middleware import ServiceMiddleware
from app.api.reception_lanes import LANES
from app.api.retrieval_order import overload_response
from app.api.routes import router
from app.api.schemas import RerankRequest
from app.health import liveness, readiness
from app.heap_trim import trim_when_quiet
from app.impressions import ImpressionLog
from app.kernel_warmup import service_kernels, start_in_background
from app.long_lived import freeze_long_lived
from app.probe_server import ProbeServer
from app.registry import ModelRegistry, sibling_reload
from app.settings import Settings
from app.supervisor import is_replacement

log = logging.getLogger(__name__)


class RerankApp(FastAPI):
    def openapi(self) -> dict[str, Any]:
        """FastAPI's schema plus the /rerank and /feedback bodies, which are parsed by hand
        and so not seen."""
        if self.openapi_schema is None:
            schema = super().openapi()
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            for model in (RerankRequest, FeedbackRequest):
                body = model.model_json_schema(ref_template="#/components/schemas/{model}")
                components.update(body.pop("$defs", {}))
                components[model.__name__] = body
            self.openapi_schema = schema
        return self.openapi_schema


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        from app.features.item_store import ItemFeatureStore
        from app.features.user_features import UserFeatureResolver
        from app.registry.reload_events import listen_for_reloads

        if settings.gil_switch_interval_ms > 0:
            sys.setswitchinterval(settings.gil_switch_interval_ms / 1000.0)
        metrics.start_series()
        resolver = UserFeatureResolver(settings)
        await resolver.start()
        from app.explain.warm import warm_later

        registry = ModelRegistry(
            settings,
            on_load=resolver.register_model,
            on_serve=partial(warm_later, freeze=settings.gc_freeze)
            if settings.explain_warm
            else None,
        )
        app.state.resolver = resolver
        app.state.item_store = ItemFeatureStore(settings, resolver.store)  # shares its Redis
        app.state.registry = registry
        app.state.scoring_limiter = anyio.CapacityLimiter(settings.scoring_concurrency)
        app.state.impressions = ImpressionLog(settings)
        app.state.exploration = Exploration(settings.exploration_share, settings.exploration_depth)
        await app.state.impressions.start()
        app.state.admission.loop_lag.start()
        if settings.body_scan:
            start_in_background()
        # A replacement worker listens for probes once it accepts requests (below): before,
        # the kernel gave it some of the pod's probes, answered /readyz 503 while it loaded.
        replacement = is_replacement()
        probes = _probe_server(settings, app) if settings.probe_port and not replacement else None

        async def on_event(model: str, version: str) -> None:
            log.info("announcement: %s/%s", model, version)
            resolver.store.forget_model(model)  # embeddings may have been re-pushed
            await registry.reload(model, force=True)

        first_done = asyncio.Event()
        first_load = _load_then_poll(
            registry, settings.reload_poll_seconds, settings.gc_freeze, first_done
        )
        tasks = [asyncio.create_task(first_load)]
        if settings.heap_trim:
            tasks.append(asyncio.create_task(_trim_once_loaded(first_done)))
        if replacement:
            await _until_loaded(first_done, settings)
            probes = _probe_server(settings, app) if settings.probe_port else None
        if settings.redis_url:
            tasks.append(asyncio.create_task(listen_for_reloads(settings, on_event)))
        # POST /admin/reload taken by another worker of this replica (none with one worker).
        reload_asked = sibling_reload.follow(lambda model: registry.reload(model, force=True))
        tasks.append(asyncio.create_task(reload_asked))
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await resolver.close()
            await app.state.impressions.close()
            await app.state.admission.loop_lag.stop()
            if probes is not None:
                probes.stop()
            metrics.mark_worker_exited()

    app = RerankApp(
        title="ltr-rerank",
        summary="Learning-to-rank reranking service",
        description="POST candidates with their features; get them back ordered by the "
        "deployed model, with its name and version.",
        version="1",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        # `/rerank/` was a 307 to a Location built from the client's Host header; a client
        # that follows it with a POST body sends the body twice. No route ends in a slash.
        redirect_slashes=False,
    )
    install_offline_docs(app)
    app.state.settings = settings
    admission = app.state.admission = AdmissionController(settings)
    LANES.configure(
        settings.reception_lanes and admission.enabled,
        settings.reception_oldest_lanes,
        settings.reception_slice_ms / 1000.0,
        settings.reception_max_wait_ms / 1000.0,
        room=admission.has_room,
    )
    admission.room_freed = LANES.kick
    app.add_middleware(DirectRerank)  # the innermost: added first
    app.add_middleware(
        ServiceMiddleware,
        max_body_bytes=settings.max_body_bytes,
        body_read_timeout=settings.body_read_timeout_seconds,
        max_buffered=settings.max_buffered_body_bytes,
        refuse_early=admission.refuse_early,
        admit=admit_rerank,
        release=release_slot,
        buffer_wait=settings.body_buffer_wait_ms / 1000.0,
        wait_most_bytes=settings.body_read_ahead_bytes,
        log_access=settings.access_log,
    )
    install_error_handlers(app)
    app.add_exception_handler(Shed, overload_response)
    app.include_router(router)
    app.include_router(feedback_router)
    return app


def _probe_server(settings: Settings, app: FastAPI) -> ProbeServer:
    assert settings.probe_port is not None
    admission = app.state.admission
    registry = app.state.registry
    return ProbeServer(
        settings.host,
        settings.probe_port,
        livez=lambda: liveness(admission.loop_lag, settings),
        readyz=lambda: readiness(registry, admission, settings),
        head_timeout_s=settings.header_read_timeout_seconds,
    ).start()


async def _load_then_poll(
    registry: ModelRegistry, poll_seconds: float, freeze: bool, first_done: asyncio.Event
) -> None:
    try:
        await registry.reload()
    except OSError:
        pass  # an unreadable registry at start, logged once: the poll may find models later
    except Exception:
        log.exception("initial model load failed")
    first_done.set()
    if freeze:
        freeze_long_lived()
    if poll_seconds > 0:
        await registry.watch(poll_seconds)


async def _trim_once_loaded(first_done: asyncio.Event) -> None:
    """The heap trimmer, once the models are loaded (their load frees memory too)."""
    await first_done.wait()
    await trim_when_quiet()


async def _until_loaded(first_done: asyncio.Event, settings: Settings) -> None:
    """Hold a replacement worker's start-up until its first load has ended (loaded or
    refused). uvicorn accepts nothing before the lifespan has started, so the siblings answer
    meanwhile: a replacement that accepted at once answered 503 "no model loaded yet" as long
    as its load took (a trial: 15-17 requests in 0.3 s after a `kill -9` of a worker, 33 over
    a SIGHUP's restart; 176 and 494 with a model compiled in seconds). At most 80 % of the
    supervisor's wait for a new worker (SIGHUP's restart gives up on one not started by
    then), so a load that hangs does not fail the restart. The compiled kernels too, which
    /readyz waits for (app.kernel_warmup.service_kernels): a replacement that accepted before
    them answered /readyz 503 for about 0.7 s of every SIGHUP restart."""
    wait = settings.worker_healthcheck_timeout_seconds * 0.8
    deadline = time.monotonic() + wait
    try:
        await asyncio.wait_for(first_done.wait(), wait)
    except TimeoutError:
        log.warning("the models are not loaded after %.0f s: accepting requests anyway", wait)
        return
    if settings.body_scan:
        for kernel in service_kernels():
            remaining = deadline - time.monotonic()
            if not await asyncio.to_thread(kernel.wait_settled, max(remaining, 0.0)):
                log.warning("the kernels are not loaded after %.0f s: accepting anyway", wait)
                return


def __getattr__(name: str) -> Any:
    """`app.main:app` for tools that want an instance; prefer `create_app --factory`."""
    if name == "app":
        return create_app()
    raise AttributeError(name)
