"""The kernel warm-up process: workers wait for it, then load what it compiled; a warm-up that
dies or hangs does not keep them waiting."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app import kernel_warmup
from app.background_kernel import BackgroundKernel
from tests.support.uvicorn_server import REPO

# Holds an exclusive lock on argv[1] until its stdin closes (or it is killed).
HOLDER = """
import fcntl, sys
with open(sys.argv[1], "w") as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    print("locked", flush=True)
    sys.stdin.read()
"""


@contextlib.contextmanager
def _holding(path: Path) -> Iterator[subprocess.Popen[str]]:
    with subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        try:
            yield holder
        finally:
            holder.kill()


def test_no_warmup_no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(kernel_warmup.LOCK_ENV, raising=False)
    assert kernel_warmup.wait_for_warmup() == 0.0
    monkeypatch.setenv(kernel_warmup.LOCK_ENV, "/nonexistent/ltr-kernel-warmup.lock")
    assert kernel_warmup.wait_for_warmup() == 0.0  # removed: the warm-up is done


def test_a_worker_waits_while_the_warmup_holds_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = tmp_path / "warmup.lock"
    monkeypatch.setenv(kernel_warmup.LOCK_ENV, str(lock))
    kernel = BackgroundKernel("test", lambda: "compiled")
    with _holding(lock) as holder:
        kernel.compile_later()
        time.sleep(0.5)
        assert kernel.ready() is None and not kernel.settled
        holder.communicate("")  # the warm-up ends
        assert kernel.wait_settled(10)
    assert kernel.ready() == "compiled"


def test_a_warmup_that_dies_frees_the_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = tmp_path / "warmup.lock"
    monkeypatch.setenv(kernel_warmup.LOCK_ENV, str(lock))
    waited: list[float] = []
    waiter = threading.Thread(target=lambda: waited.append(kernel_warmup.wait_for_warmup()))
    with _holding(lock) as holder:
        waiter.start()
        time.sleep(0.3)
        holder.kill()
        holder.wait()
        waiter.join(10)
    assert waited and 0.2 < waited[0] < 5


def test_a_hung_warmup_is_waited_for_at_most_max_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = tmp_path / "warmup.lock"
    monkeypatch.setenv(kernel_warmup.LOCK_ENV, str(lock))
    with _holding(lock):
        assert 0.3 <= kernel_warmup.wait_for_warmup(max_wait=0.3) < 2


def test_the_warmup_process_compiles_the_kernels_and_cleans_up() -> None:
    # In a child: this process may hold the kernels compiled already.
    check = """
import os, time
from app import kernel_warmup
with kernel_warmup.warmup_process() as child:
    path = os.environ[kernel_warmup.LOCK_ENV]
    late = os.environ[kernel_warmup.LATE_LOCK_ENV]
    assert os.path.exists(path) and os.path.exists(late)
    waited = kernel_warmup.wait_for_warmup()
    assert not os.path.exists(path)  # removed by the warm-up itself
    kernel_warmup.wait_for_warmup(late=True)
    assert not os.path.exists(late)
    for _ in range(600):  # reaped as it exits: never left as a defunct process
        if not os.path.exists(f"/proc/{child.pid}"):
            break
        time.sleep(0.1)
    assert child.returncode == 0, child.returncode
from app.api import answer_kernel, body_kernel, map_kernel
from app.api.body_scan import KERNEL, WORD_KERNEL
KERNEL.compile_now()  # from numba's cache now
words = WORD_KERNEL.compile_now().scan
kernels = (body_kernel.scan, map_kernel.fill, answer_kernel.write_results, words)
hits = sum(sum(f.stats.cache_hits.values()) for f in kernels)
misses = sum(sum(f.stats.cache_misses.values()) for f in kernels)
envs = (kernel_warmup.LOCK_ENV, kernel_warmup.LATE_LOCK_ENV)
print(hits, misses, any(env in os.environ for env in envs))
"""
    done = subprocess.run(
        [sys.executable, "-c", check], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    hits, misses, lock_left = done.stdout.split()
    assert lock_left == "False"
    # The warm-up's own log lines: the service kernels, then the late one.
    logged = done.stderr
    assert "body-scan kernel compiled" in logged
    assert logged.index("item-lookup kernel compiled") < logged.index("body-scan words kernel")
    # Loaded from what the warm-up wrote to numba's cache, not compiled again (a timing bound
    # said so before: 10.24 s against 10 in a CI run on a machine at load 24).
    assert (int(hits), int(misses)) >= (4, 0) and int(misses) == 0, done.stdout


def test_a_late_kernel_waits_for_the_late_lock_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The service kernels go on as soon as the first lock is released; a late one waits for
    the second (the warm-up compiling it after them)."""
    first, second = tmp_path / "warmup.lock", tmp_path / "late.lock"
    monkeypatch.setenv(kernel_warmup.LOCK_ENV, str(first))
    monkeypatch.setenv(kernel_warmup.LATE_LOCK_ENV, str(second))
    service = BackgroundKernel("service", lambda: "service")
    late = BackgroundKernel("late", lambda: "late", late=True)
    with _holding(second) as late_holder:
        with _holding(first) as holder:
            service.compile_later()
            late.compile_later()
            time.sleep(0.3)
            assert service.ready() is None and late.ready() is None
            holder.communicate("")
            assert service.wait_settled(10) and service.ready() == "service"
        time.sleep(0.3)
        assert late.ready() is None and not late.settled
        late_holder.communicate("")
        assert late.wait_settled(10)
    assert late.ready() == "late"


def test_a_worker_starts_the_late_kernels_after_the_service_kernels(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without a warm-up process a worker compiles them all itself, one at a time: a late one
    must not go first and hold /readyz back."""
    monkeypatch.delenv(kernel_warmup.LOCK_ENV, raising=False)
    monkeypatch.delenv(kernel_warmup.LATE_LOCK_ENV, raising=False)
    release = threading.Event()
    order: list[str] = []

    def slow_service() -> str:
        release.wait(10)
        order.append("service")
        return "service"

    service = BackgroundKernel("service", slow_service)
    late = BackgroundKernel("late", lambda: order.append("late") or "late", late=True)
    monkeypatch.setattr(kernel_warmup, "service_kernels", lambda: (service,))
    monkeypatch.setattr(kernel_warmup, "late_kernels", lambda: (late,))
    kernel_warmup.start_in_background()
    time.sleep(0.3)
    assert order == [] and late.ready() is None
    release.set()
    assert service.wait_settled(10)
    for _ in range(100):
        if late.ready() is not None:
            break
        time.sleep(0.05)
    assert order == ["service", "late"] and late.ready() == "late"
