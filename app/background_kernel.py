"""A compiled kernel that no request waits for.

numba's import and a compile take seconds (or a fraction of one from numba's disk cache), so
a kernel is compiled once per process in a daemon thread, niced, and until it is ready its
callers take their Python path, which gives the same results. Where a warm-up process
compiles the kernels meanwhile (app.kernel_warmup), the thread waits for it and then loads them
from numba's cache.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from app.kernel_warmup import wait_for_warmup

log = logging.getLogger(__name__)
K = TypeVar("K")


class BackgroundKernel(Generic[K]):
    """`load` compiles (or loads from numba's cache) and returns the kernel (or kernels);
    `name` is what the log lines call it; `late`: one of the warm-up's late kernels."""

    def __init__(self, name: str, load: Callable[[], K], *, late: bool = False) -> None:
        self.name = name
        self._load = load
        self.late = late  # compiled by the warm-up after the others (app.kernel_warmup)
        self._kernel: K | None = None
        self._started = False
        self._lock = threading.Lock()
        self._settled = threading.Event()

    def ready(self) -> K | None:
        """The compiled kernel, or None while it is not (yet) available."""
        return self._kernel

    @property
    def settled(self) -> bool:
        """Whether the compile has ended, ready or failed (the Python path then serves)."""
        return self._settled.is_set()

    def wait_settled(self, timeout: float | None = None) -> bool:
        """Blocks until the compile started by `compile_later` has ended (at once when none
        was started); False on a timeout."""
        if not self._started:
            return True
        return self._settled.wait(timeout)

    def compile_now(self) -> K:
        """Compiles (or loads from numba's cache) the kernel on this thread."""
        if self._kernel is None:
            self._kernel = self._load()
        self._settled.set()
        return self._kernel

    def compile_later(self) -> None:
        """Starts the background compile once per process (a no-op after the first call)."""
        with self._lock:
            if self._started:
                return
            self._started = True
        threading.Thread(target=self._compile, name=self.name, daemon=True).start()

    def _compile(self) -> None:
        with contextlib.suppress(AttributeError, OSError):  # Linux nices single threads
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        started = time.perf_counter()
        # A warm-up process compiling it: then load what it wrote to numba's cache.
        waited = wait_for_warmup(late=self.late)
        try:
            self.compile_now()
        except Exception:  # the Python path serves on; requests must not depend on this
            log.exception("compiling the %s kernel failed; using the Python path", self.name)
            self._settled.set()
            return
        seconds = time.perf_counter() - started
        waiting = f" ({waited:.2f} s of it waiting for the warm-up)" if waited else ""
        log.info("%s kernel ready in %.2f s%s", self.name, seconds, waiting)
