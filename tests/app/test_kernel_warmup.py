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
    assert os.path.exists(path)
    waited = kernel_warmup.wait_for_warmup()
    assert not os.path.exists(path)  # removed by the warm-up itself
    for _ in range(600):  # reaped as it exits: never left as a defunct process
        if not os.path.exists(f"/proc/{child.pid}"):
            break
        time.sleep(0.1)
    assert child.returncode == 0, child.returncode
from app.api.body_scan import KERNEL
started = time.perf_counter()
KERNEL.compile_now()  # from numba's cache now
print(round(time.perf_counter() - started, 2), kernel_warmup.LOCK_ENV in os.environ)
"""
    done = subprocess.run(
        [sys.executable, "-c", check], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    load_seconds, lock_left = done.stdout.split()
    assert lock_left == "False"
    assert "body-scan kernel compiled" in done.stderr  # the warm-up's own log line
    # A load from numba's cache: a cold compile of the body scan takes tens of seconds.
    assert float(load_seconds) < 10, done.stdout
