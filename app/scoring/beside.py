"""A second thread for one compiled scoring call at a time, beside the calling thread.

An interleaved request scores two model versions; on two cores they could score at once. A
pooled Python thread did not manage it (300 rows x 300 trees, ~0.21 ms per version, on a
2-vCPU virtual machine): woken, it needs the GIL before it can run anything, and Linux puts a
woken thread on the waker's CPU, where it preempted the event loop's thread, so both versions
together took 0.50 ms, no less than one after the other (0.46 ms). This worker lives in native
code (app.scoring.compiler.beside_ir): it blocks in `read` on a pipe, polls a mailbox once
woken, and runs the posted call without ever taking the GIL; its CPU affinity excludes the
CPU the caller runs on. Both versions then took 0.22-0.25 ms.

Linux only (affinity, a Linux clock id), and only with at least two CPUs to run on: `ready()`
is None elsewhere, and callers score one call after the other.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import platform
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from app.scoring.compiler import beside_ir as ir

T = TypeVar("T")
log = logging.getLogger(__name__)

# How long a woken worker polls for a call before it blocks again. A call is posted right
# after the wake, so this only bounds the polling when the caller took its call back.
SPIN_SECONDS = 0.001

# void fn(ptr x, ptr out, i64 count, ptr thresholds, ptr leaf_numbers, ptr leaf_values)
ENTRY_ARGS = (
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_int64,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_void_p,
)


@dataclass(frozen=True)
class NativeCall:
    """A compiled scorer's entry and its six arguments (addresses and a block count); the
    caller keeps the arrays they point into alive until the call has run."""

    entry: int
    args: tuple[int, int, int, int, int, int]


class BesideWorker:
    """One native thread per process, for one call at a time: a caller that finds a call in
    flight (another thread's) runs its own call itself."""

    def __init__(self, allowed_cpus: set[int]) -> None:
        from app.scoring.compiler.jit import CompiledModule, emit_objects

        self.pid = os.getpid()
        self._allowed = frozenset(allowed_cpus)
        self._module = CompiledModule(emit_objects([ir.beside_ir(platform.machine())]))
        libc = ctypes.CDLL(None, use_errno=True)
        self._sched_getcpu = libc.sched_getcpu
        self._sched_getcpu.restype = ctypes.c_int
        self._yield = _address(libc.sched_yield)
        self._box = np.zeros(ir.MAILBOX_SLOTS, dtype=np.int64)
        self._box_ptr = self._box.ctypes.data
        address = self._module.address
        # The caller's side keeps the GIL (quick calls, or waits nothing else may run during).
        self._post = ctypes.PYFUNCTYPE(None, ctypes.c_void_p, *[ctypes.c_int64] * 7)(
            address(ir.POST)
        )
        self._take_back = ctypes.PYFUNCTYPE(ctypes.c_int64, ctypes.c_void_p)(address(ir.TAKE_BACK))
        self._wait = ctypes.PYFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(address(ir.WAIT))
        # The worker's side releases it, for its whole life.
        serve = ctypes.CFUNCTYPE(
            None,
            ctypes.c_void_p,
            ctypes.c_int64,
            ctypes.c_void_p,
            ctypes.c_int32,
            ctypes.c_void_p,
            ctypes.c_void_p,
        )(address(ir.SERVE))
        self._wake_read, self._wake_write = os.pipe()
        # A full pipe means wake-ups are already pending: a caller must never block on it.
        os.set_blocking(self._wake_write, False)
        self._pinned_away_from = -1
        self._in_flight = threading.Lock()
        started = threading.Event()
        self._thread_id = 0

        def live() -> None:
            self._thread_id = threading.get_native_id()
            started.set()
            serve(
                self._box_ptr,
                int(SPIN_SECONDS * 1e9),
                _address(libc.read),
                self._wake_read,
                self._yield,
                _address(libc.clock_gettime),
            )

        self._thread = threading.Thread(target=live, name="ltr-beside", daemon=True)
        self._thread.start()
        started.wait()

    def run_beside(self, call: NativeCall, here: Callable[[], T]) -> tuple[T, float]:
        """(here(), seconds `call` took): `call` on the worker while `here` runs on this
        thread; if the worker has not taken it by the time `here` returns, this thread runs
        it. When `here` raises, `call` is dropped if not yet taken (else waited for) and the
        error is raised."""
        if not self._in_flight.acquire(blocking=False):
            result = here()
            return result, _run_here(call)
        try:
            return self._run_beside(call, here)
        finally:
            self._in_flight.release()

    def _run_beside(self, call: NativeCall, here: Callable[[], T]) -> tuple[T, float]:
        self._pin_away()
        box = self._box
        self._post(self._box_ptr, call.entry, *call.args)
        if box[ir.WORKER] != ir.SPINNING:
            with contextlib.suppress(BlockingIOError):
                os.write(self._wake_write, b"\0")
        try:
            result = here()
        except BaseException:
            if not self._take_back(self._box_ptr):
                self._wait(self._box_ptr, self._yield)
            raise
        if self._take_back(self._box_ptr):
            box[ir.WORKER] = ir.QUIT_SPIN  # nothing more is coming: let it sleep
            return result, _run_here(call)
        self._wait(self._box_ptr, self._yield)
        return result, float(box[ir.ELAPSED]) / 1e9

    def stop(self) -> None:
        """Ends the worker thread (calls posted afterwards are taken back and run here)."""
        self._box[ir.STOPPED] = 1
        self._box[ir.WORKER] = ir.QUIT_SPIN  # a spinning worker goes to sleep, then wakes
        with contextlib.suppress(BlockingIOError):  # a full pipe wakes it too
            os.write(self._wake_write, b"\0")
        self._thread.join()

    def _pin_away(self) -> None:
        """Keeps the worker off the CPU this thread is on, where it would preempt it."""
        cpu = self._sched_getcpu()
        if cpu == self._pinned_away_from or cpu < 0:
            return
        others = self._allowed - {cpu}
        if others:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(self._thread_id, others)
        self._pinned_away_from = cpu


def _address(fn: Any) -> int:
    value = ctypes.cast(fn, ctypes.c_void_p).value
    if not value:
        raise OSError(f"no address for {fn!r}")
    return int(value)


# The entry called keeping the GIL (why: app.scoring.compiled, which uses it on an event
# loop's thread); a call taken back runs so too.
HELD_ENTRY_TYPE = ctypes.PYFUNCTYPE(None, *ENTRY_ARGS)


def _run_here(call: NativeCall) -> float:
    """Runs `call` on this thread; the seconds it took."""
    started = time.perf_counter()
    HELD_ENTRY_TYPE(call.entry)(*call.args)
    return time.perf_counter() - started


def available() -> bool:
    """Whether this process can have a worker: Linux, and two CPUs it may run on."""
    return (
        platform.system() == "Linux"
        and hasattr(os, "sched_setaffinity")
        and len(os.sched_getaffinity(0)) >= 2
    )


def _start() -> BesideWorker | None:
    return BesideWorker(os.sched_getaffinity(0)) if available() else None


# Compiling the worker's code takes ~15 ms of LLVM, which no request waits for: the first
# interleave experiment starts it in a background thread (not a niced one, as the compiled
# kernels' are: the worker thread would inherit its priority).
_state: dict[str, BesideWorker | None] = {}
_lock = threading.Lock()


def start_later() -> None:
    """Starts this process's worker in the background, once."""
    if "started" in _state:
        return
    with _lock:
        if "started" in _state:
            return
        _state["started"] = None
    threading.Thread(target=_start_now, name="ltr-beside-start", daemon=True).start()


def _start_now() -> None:
    try:
        _state["worker"] = _start()
    except (OSError, RuntimeError, LookupError, AttributeError) as exc:
        log.warning("no beside scoring thread (%s): interleaved versions score in turn", exc)


def ready() -> BesideWorker | None:
    """This process's worker once started; None before, or where there is none to have (a
    forked child inherits the object but not the thread)."""
    found = _state.get("worker")
    return found if found is not None and found.pid == os.getpid() else None
