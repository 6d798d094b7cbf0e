"""`POST /admin/reload` for every worker of a replica, not only the one that took the request.

With several workers each is a process of its own, and the request reaches one: the others
kept serving the old version until their next poll (an operator trial, LTR_WORKERS=2 and a
2-minute poll: 7 of 30 answers still from the old version, and 11 of 30 ten seconds later).
The workers share a directory (the metrics', app.metrics.multiprocess_dir); the worker that
took the request writes a stamp there, and every worker reads the stamp (a few bytes) every
CHECK_SECONDS and reloads, as the request did, when another worker wrote a new one.
With one worker there is nothing to tell.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from app import metrics

log = logging.getLogger(__name__)

STAMP = "admin-reload.stamp"
CHECK_SECONDS = 0.2

Reload = Callable[[str | None], Awaitable[object]]


def stamp_path() -> Path | None:
    shared = metrics.multiprocess_dir()
    return Path(shared) / STAMP if shared else None


def announce(model: str | None) -> bool:
    """Tell the other workers to reload `model` (None: every model); whether there are any."""
    path = stamp_path()
    if path is None:
        return False
    text = f"{os.getpid()} {time.time_ns()} {model or ''}"
    part = path.with_name(f".{STAMP}.{os.getpid()}")
    part.write_text(text)
    os.replace(part, path)  # readers see a whole stamp or the previous one
    return True


async def follow(reload: Reload) -> None:
    """Reload whenever another worker announces, until cancelled."""
    path = stamp_path()
    if path is None:
        return
    seen = _read(path)  # a stamp from before this worker started is not for it
    while True:
        await asyncio.sleep(CHECK_SECONDS)
        stamp = _read(path)
        if stamp is None or stamp == seen:
            continue
        seen = stamp
        pid, _, model = [*stamp.split(" ", 2), "", ""][:3]
        if pid == str(os.getpid()):
            continue
        try:
            await reload(model or None)
        except OSError:
            pass  # the registry logs an unreadable registry once; the poll retries
        except Exception:  # the follower must outlive any surprise
            log.exception("reload asked by another worker failed")


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None
