"""Explainers made ready in the background as tree models start serving, so that no request
pays the one-off costs of a first explanation: the explainer's tables, and the TreeSHAP
kernel (numba's import and a compile, or a load from numba's on-disk cache).

One daemon thread, niced where the OS allows it, works through the served models in turn; the
registry only queues them (`LTR_EXPLAIN_WARM`), so /readyz never waits. A request that explains
while the warm-up is still running waits on the same locks (tables, numba's compile lock), so
the work is never done twice.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time

import numpy as np

from app.api.body_marks import KERNEL as SHED_IDS
from app.api.body_scan import KERNEL as BODY_SCAN
from app.long_lived import freeze_long_lived
from app.registry import LoadedModel

log = logging.getLogger(__name__)

READINESS_KERNELS_WAIT_SECONDS = 600.0
_pending: queue.SimpleQueue[tuple[LoadedModel, bool]] = queue.SimpleQueue()
_worker: threading.Thread | None = None
_lock = threading.Lock()


def warm_later(model: LoadedModel, freeze: bool = False) -> None:
    """Queues a served tree model for warming (networks need nothing: occlusion scores);
    `freeze`: its explainer's tables then leave the garbage collector's scans (gc.freeze)."""
    global _worker
    if model.manifest.kind != "lambdamart":
        return
    with _lock:
        if _worker is None or not _worker.is_alive():
            _worker = threading.Thread(target=_work, name="explain-warm-up", daemon=True)
            _worker.start()
    _pending.put((model, freeze))


def warm(model: LoadedModel) -> bool:
    """Builds the model's explainer and explains one row; False if it cannot be explained."""
    from app.explain.ranked import ExplainUnavailable, tree_explainer

    try:
        explainer = tree_explainer(model)
    except ExplainUnavailable:
        return False
    explainer.contributions(np.zeros((1, explainer.num_features)))
    return True


def _work() -> None:
    _lower_priority()
    while True:
        model, freeze = _pending.get()
        _warm_queued(model, freeze and _pending.empty())
        del model  # not kept alive until the next one arrives


def _warm_queued(model: LoadedModel, freeze: bool) -> None:
    # /readyz waits for the body scans: their compile (or load from numba's cache) goes first,
    # not behind this one's, which holds numba's compiler lock and the GIL for seconds (a
    # first `make run`: 65 s of it beside them).
    for kernel in (BODY_SCAN, SHED_IDS):
        kernel.wait_settled(READINESS_KERNELS_WAIT_SECONDS)
    started = time.perf_counter()
    try:
        if warm(model):
            seconds = time.perf_counter() - started
            log.info("explainer of %s/%s ready in %.2f s", model.name, model.version, seconds)
            if freeze:
                # Its tables stay as long as the model; requests are being served, so no full
                # collection first (that would be the very pause this avoids).
                freeze_long_lived(collect=False)
    except Exception:  # the next model, and the requests, must not depend on this one
        log.exception("warming the explainer of %s/%s failed", model.name, model.version)


def _lower_priority() -> None:
    """Linux nices single threads: the warm-up leaves the CPU to requests when both want it."""
    with contextlib.suppress(AttributeError, OSError):  # elsewhere: whole processes, or refused
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
