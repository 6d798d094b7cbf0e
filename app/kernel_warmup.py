"""The service's compiled kernels (body scan, shed ids, item lookup, then the body scan's word
form) compiled in a process of their own, before or while the server starts.

With numba's cache empty (a first `make run`, a fresh container), compiling them takes tens
of seconds (45 s for the body scan alone on a slow 2-vCPU VM), and in the server that work
holds the worker's GIL in long spurts while the explainer's warm-up and the demo's second
model want it too: /readyz waited for it 193 s after `make run` began on a fresh clone. A
second process compiles them on the other core while the demo model trains; the workers then
load them from numba's on-disk cache (`cache=True`) in a second or two.

The process holds an exclusive `flock` on a lock file until the service kernels are compiled
(taken by its parent before it starts, so no worker can slip in first); a worker's
`BackgroundKernel` waits for a shared lock on the same file, named by LTR_KERNEL_WARMUP_LOCK,
before it compiles (`wait_for_warmup`). Locks go with the process, so a warm-up that dies
frees the workers too. Then it compiles the late kernels (`late_kernels`: no probe or request
waits for them, their callers have another path meanwhile) under a second lock
(LTR_KERNEL_WARMUP_LATE_LOCK), which their BackgroundKernels wait for instead.

`python -m app.kernel_warmup LOCK_PATH LATE_LOCK_PATH` is that process (its locks arrive as
inherited descriptors); it removes each lock file when its kernels are done, its parent those
left. Without them it only compiles: the serve image bakes numba's cache that way
(app.numba_cache_seed).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.background_kernel import BackgroundKernel

log = logging.getLogger(__name__)

LOCK_ENV = "LTR_KERNEL_WARMUP_LOCK"
LATE_LOCK_ENV = "LTR_KERNEL_WARMUP_LATE_LOCK"
FD_ENV = "LTR_KERNEL_WARMUP_FD"  # the child's descriptors of the two locks, "main,late"
POLL_SECONDS = 0.1
# Past this a worker compiles on its own: a warm-up stuck for whatever reason must not keep
# the compiled paths away for good (compiling twice costs time, never results).
MAX_WAIT_SECONDS = 600.0


@contextlib.contextmanager
def warmup_process() -> Iterator[subprocess.Popen[bytes]]:
    """Starts the warm-up process and sets LTR_KERNEL_WARMUP_LOCK and
    LTR_KERNEL_WARMUP_LATE_LOCK for the workers this process starts; on leaving, stops the
    process if it still runs and removes the locks."""
    locks: list[tuple[int, str]] = []
    try:
        for _ in range(2):
            fd, path = tempfile.mkstemp(prefix="ltr-kernel-warmup-", suffix=".lock")
            locks.append((fd, path))
            fcntl.flock(fd, fcntl.LOCK_EX)  # shared with the child: it holds it from its start
        fds = [fd for fd, _ in locks]
        child = subprocess.Popen(
            [sys.executable, "-m", __name__, *(path for _, path in locks)],
            env={**os.environ, FD_ENV: ",".join(map(str, fds))},
            pass_fds=fds,
            stdout=subprocess.DEVNULL,
        )
    except BaseException:
        for fd, path in locks:
            os.close(fd)
            Path(path).unlink(missing_ok=True)
        raise
    for fd, _ in locks:
        os.close(fd)  # each lock stays with the child's copy of the descriptor
    (_, path), (_, late_path) = locks
    os.environ[LOCK_ENV], os.environ[LATE_LOCK_ENV] = path, late_path
    reap(child)
    try:
        yield child
    finally:
        stop(child)
        for env, each in ((LOCK_ENV, path), (LATE_LOCK_ENV, late_path)):
            os.environ.pop(env, None)
            Path(each).unlink(missing_ok=True)


def reap(child: subprocess.Popen[bytes]) -> None:
    """Collects `child`'s exit as soon as it comes, so that it does not stay listed as a
    defunct process for as long as the server runs."""
    threading.Thread(target=child.wait, name="reap", daemon=True).start()


def stop(child: subprocess.Popen[bytes]) -> None:
    """Terminates `child` if it still runs, and waits for it."""
    if child.poll() is None:
        child.terminate()
    child.wait()


def wait_for_warmup(max_wait: float = MAX_WAIT_SECONDS, *, late: bool = False) -> float:
    """Blocks while a warm-up process named by LTR_KERNEL_WARMUP_LOCK (`late`: its
    LTR_KERNEL_WARMUP_LATE_LOCK) compiles; the seconds waited (0 when there is none)."""
    path = os.environ.get(LATE_LOCK_ENV if late else LOCK_ENV)
    if not path:
        return 0.0
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # gone: the warm-up and its parent are done
        return 0.0
    started = time.monotonic()
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return time.monotonic() - started
            except BlockingIOError:
                if time.monotonic() - started > max_wait:
                    log.warning("kernel warm-up still running after %.0f s: compiling", max_wait)
                    return time.monotonic() - started
                time.sleep(POLL_SECONDS)
    finally:
        os.close(fd)


def service_kernels() -> tuple[BackgroundKernel[Any], ...]:
    """The kernels every worker loads at start (with LTR_BODY_SCAN): the body scan, a shed
    request's ids and the in-process item lookup. This process compiles them, a worker loads
    them in the background, and /readyz and a replacement worker's start wait for them: one
    list, as a kernel left off one of those lists was served while it loaded (its load holds
    the GIL in spurts)."""
    from app.api.body_marks import KERNEL as SHED_IDS
    from app.api.body_scan import KERNEL as BODY_SCAN
    from app.features.item_lookup import KERNEL as ITEM_LOOKUP

    return (BODY_SCAN, SHED_IDS, ITEM_LOOKUP)


def late_kernels() -> tuple[BackgroundKernel[Any], ...]:
    """Kernels compiled after the service kernels, which nothing waits for: the body scan's
    word form (app.api.body_scan.WORD_KERNEL; until it is ready, long numbers are read digit
    by digit)."""
    from app.api.body_scan import WORD_KERNEL

    return (WORD_KERNEL,)


def start_in_background() -> None:
    """A worker's compiles (or cache loads) of the kernels, in background threads: the service
    kernels at once, the late ones once those have settled. Without a warm-up process (uvicorn
    run directly, numba's cache empty) the worker compiles them all itself, and numba compiles
    one at a time: a late kernel first would hold /readyz back by its whole compile."""
    services = service_kernels()
    for kernel in services:
        kernel.compile_later()

    def after_services() -> None:
        for kernel in services:
            kernel.wait_settled()
        for kernel in late_kernels():
            kernel.compile_later()

    threading.Thread(target=after_services, name="late-kernels", daemon=True).start()


def compile_all(kernels: tuple[BackgroundKernel[Any], ...] | None = None) -> None:
    """Compiles (or loads from numba's cache) `kernels`, by default every kernel the workers
    compile at start, the late ones included."""
    for kernel in kernels if kernels is not None else (*service_kernels(), *late_kernels()):
        started = time.perf_counter()
        kernel.compile_now()
        log.info("%s kernel compiled in %.1f s", kernel.name, time.perf_counter() - started)


def main(argv: list[str]) -> None:
    # The inherited descriptors keep the parent's exclusive locks: "main,late".
    held = [int(fd) for fd in os.environ.get(FD_ENV, "").split(",") if fd]
    logging.basicConfig(level=logging.INFO, format="kernel warm-up: %(message)s")
    if not held:
        compile_all()
        return
    locks = list(zip(argv, held, strict=False))  # each released once, in order
    try:
        compile_all(service_kernels())
        _release(*locks.pop(0))
        with contextlib.suppress(OSError):  # the late ones yield the CPU to anything else
            os.setpriority(os.PRIO_PROCESS, 0, 19)
        compile_all(late_kernels())
    finally:
        for path, fd in locks:
            _release(path, fd)


def _release(path: str, fd: int) -> None:
    """Removed while still locked: a worker that opens it later finds nothing to wait for, and
    one already waiting on it is released by the close. Once per lock: a second close could
    close whatever file has since been given the same descriptor number."""
    with contextlib.suppress(OSError):
        os.unlink(path)
    os.close(fd)


if __name__ == "__main__":
    main(sys.argv[1:])
