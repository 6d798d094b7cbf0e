"""Process-wide thread pools by purpose and size: whatever asks for one (model versions come and
go, apps are made in tests) shares its threads, created once."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

_pools: dict[tuple[str, int], ThreadPoolExecutor] = {}
_lock = threading.Lock()


def thread_pool(name: str, workers: int) -> ThreadPoolExecutor:
    """The pool of `workers` threads named `name`_N, made on first use."""
    with _lock:
        pool = _pools.get((name, workers))
        if pool is None:
            pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
            _pools[(name, workers)] = pool
        return pool
