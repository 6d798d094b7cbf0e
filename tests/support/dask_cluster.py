"""A real Dask cluster for tests: `dask scheduler` and `dask worker` processes (no nanny, one
thread each) on free ports, importing this checkout's code. A test may kill a worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.redis_server import free_port

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 90.0  # the machine is shared; process start-up is slow under load


class DaskCluster:
    def __init__(self, workers: int = 2) -> None:
        self.port = free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.workers: list[subprocess.Popen[bytes]] = []
        self.scheduler: subprocess.Popen[bytes] | None = None
        self.num_workers = workers

    def _spawn(self, *args: str) -> subprocess.Popen[bytes]:
        env = os.environ | {"PYTHONPATH": str(ROOT)}  # workers import this checkout's trainer
        module = f"distributed.cli.dask_{args[0]}"
        return subprocess.Popen(
            [sys.executable, "-m", module, *args[1:]],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def start(self) -> DaskCluster:
        from distributed import Client

        self.scheduler = self._spawn(
            "scheduler", "--host", "127.0.0.1", "--port", str(self.port), "--no-dashboard"
        )
        for i in range(self.num_workers):
            self.workers.append(
                self._spawn(
                    "worker", self.address, "--nthreads", "1", "--no-nanny",
                    "--no-dashboard", "--name", f"test-worker-{i}", "--memory-limit", "0",
                )
            )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                with Client(self.address, timeout=5, set_as_default=False) as client:
                    client.wait_for_workers(self.num_workers, timeout=START_TIMEOUT_S)
                    return self
            except (OSError, TimeoutError):
                if time.monotonic() > deadline:
                    self.stop()
                    raise
                time.sleep(0.5)

    def kill_worker(self, index: int) -> None:
        os.killpg(self.workers[index].pid, signal.SIGKILL)
        self.workers[index].wait()

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> None:
        for proc in [*self.workers, self.scheduler]:
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, sig)
        for proc in [*self.workers, self.scheduler]:
            if proc is None:
                continue
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture(scope="session")
def dask_cluster() -> Iterator[DaskCluster]:
    """Two workers shared by every test that only trains and reads (never breaks them)."""
    cluster = DaskCluster(workers=2).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def dask_cluster_to_break() -> Iterator[DaskCluster]:
    """Two workers of this test's own, which it may kill. Stopped with SIGKILL: a worker left
    waiting in LightGBM's network for a killed peer does not heed SIGTERM (its wait cost every
    run 10 s)."""
    cluster = DaskCluster(workers=2).start()
    try:
        yield cluster
    finally:
        cluster.stop(signal.SIGKILL)
