"""`make run` as a fixture: `ltr serve --demo` (trains the demo model on the bundled data into an
empty registry, then serves it) on a free port, shared by the tests that check what a new user
sees first: the README's commands and every documented example."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support.redis_server import free_port

DEMO_READY_TIMEOUT_S = 480.0  # the first run compiles the trainer's numba kernels


@dataclass(frozen=True)
class DemoServer:
    url: str
    port: int
    registry: Path
    log: Path


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="session")
def demo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoServer]:
    registry = tmp_path_factory.mktemp("demo-registry")
    log_path = registry.parent / "demo-serve.log"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LTR_")}
    env["LTR_RELOAD_POLL_SECONDS"] = "0.5"
    command = [sys.executable, "-m", "trainer", "serve", "--registry", str(registry)]
    command += ["--port", str(port), "--demo", "--log-level", "warning"]
    with log_path.open("w") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    server = DemoServer(f"http://127.0.0.1:{port}", port, registry, log_path)

    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"ltr serve --demo exited:\n{log_path.read_text()}")
        if httpx.get(f"{server.url}/readyz").status_code != 200:
            return False
        # demo-items (the id-only example's model) is published while the server runs.
        models = httpx.get(f"{server.url}/models").json()["models"]
        return {m["name"] for m in models} >= {"demo", "demo-items"}

    try:
        wait_for(ready, DEMO_READY_TIMEOUT_S, f"the demo model ({log_path})")
        yield server
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
