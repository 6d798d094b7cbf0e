"""Objects that live as long as the process leave the cyclic garbage collector's scans.

A full collection walks every tracked container. After start-up that is mostly libraries,
the loaded models and the explainers' tables (a 500-tree model and its explainer: hundreds
of thousands of objects), so each full collection paused served requests for 30-80 ms on a
2-core machine. `gc.freeze()` moves everything alive now to a permanent generation that
collections skip (the Python documentation recommends it for long-running servers); what
requests allocate afterwards is scanned as before. Objects frozen and later dropped are still
freed by reference counting; only cycles among them stay until exit, which for models
replaced a few times a day is a few megabytes at most.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger(__name__)


def freeze_long_lived(collect: bool = True) -> None:
    """Freeze what is alive now (call once something long-lived, such as a model or an
    explainer, has been built), after collecting what is garbage. `collect=False` where a
    full collection would itself pause served requests (a thread beside a serving loop):
    freezing alone only moves the collector's lists."""
    if collect:
        gc.collect()
    gc.freeze()
    log.debug("%d objects frozen out of the collector's scans", gc.get_freeze_count())
