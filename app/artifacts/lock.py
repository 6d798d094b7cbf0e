"""One writer at a time per model: `<registry>/<model>/.lock`, held with `fcntl.flock`.

Publishing (install → CURRENT → prune), rollback and experiment changes each read the
registry, decide, then write several files; two of them interleaved left CURRENT naming a
version the other had pruned. The lock is advisory: services only read and never take it.
"""

from __future__ import annotations

import fcntl
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from app.artifacts.manifest import NAME_PATTERN
from app.artifacts.store import ArtifactError

LOCK_FILE = ".lock"
_local = threading.local()


def _held() -> set[str]:
    held: set[str] | None = getattr(_local, "held", None)
    if held is None:
        held = _local.held = set()
    return held


def check_model_name(name: str) -> None:
    """ArtifactError unless `name` is one a model can have (no path separators, no `..`)."""
    if not re.fullmatch(NAME_PATTERN, name):
        raise ArtifactError(f"{name!r} is not a model name (letters, digits, '.', '_', '-')")


@contextmanager
def model_lock(registry: Path, name: str) -> Iterator[None]:
    """Hold the model's lock (creating its directory); re-entrant within one thread, since a
    second flock on a fresh descriptor of the same file would wait for ourselves.

    ArtifactError for a `name` no model can have, before anything is created: `--name
    ../../x` made `.lock` (and its directories) outside the registry, then was refused."""
    check_model_name(name)
    model_dir = Path(registry) / name
    model_dir.mkdir(parents=True, exist_ok=True)
    key = str(model_dir.resolve())
    held = _held()
    if key in held:
        yield
        return
    fd = os.open(model_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        held.add(key)
        try:
            yield
        finally:
            held.discard(key)
    finally:
        os.close(fd)  # releases the flock
