"""Our own `redis-server` on a free port, for tests that break it on purpose.

Never the machine's shared Redis: each server is a child process with no persistence, which a
test may kill (SIGKILL), pause (SIGSTOP), resume (SIGCONT) and restart on the same port.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

START_TIMEOUT_S = 10.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ping(port: int, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    def __init__(self, binary: str, port: int | None = None) -> None:
        self.binary = binary
        self.port = port or free_port()
        self.workdir = Path(tempfile.mkdtemp(prefix="ltr-redis-"))
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError(f"redis-server already running on port {self.port}")
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        args += ["--save", "", "--appendonly", "no", "--dir", str(self.workdir)]
        self.proc = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=self.workdir
        )
        end = time.monotonic() + START_TIMEOUT_S
        while not _ping(self.port):
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}")
            if time.monotonic() > end:
                self.kill()
                raise RuntimeError(f"redis-server did not answer PING on port {self.port}")
            time.sleep(0.01)
        self.paused = False
        return self

    def kill(self) -> None:
        """SIGKILL: the server vanishes as in a crash, its data with it."""
        if self.proc is None:
            return
        if self.paused:
            self.resume()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        self.proc = None

    def pause(self) -> None:
        """SIGSTOP: the port still accepts connections, nothing answers."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)
        self.paused = False

    def restart(self) -> RedisServer:
        """Kill, then start again on the same port (empty: there is no persistence)."""
        self.kill()
        return self.start()

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self.workdir, ignore_errors=True)


def redis_binary() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (`make redis` installs it)")
    return binary


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A fresh redis-server per test (it starts in a few milliseconds)."""
    server = RedisServer(redis_binary()).start()
    try:
        yield server
    finally:
        server.stop()


def pipelines_die_at(monkeypatch: Any, call: int) -> dict[str, int]:
    """From now on, the `call`-th redis-py pipeline execution raises ConnectionError (as a
    connection lost half-way through a push); the counter it returns can be reset."""
    import redis

    real = redis.client.Pipeline.execute
    calls = {"n": 0}

    def dies_half_way(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == call:
            raise redis.ConnectionError("connection lost")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(redis.client.Pipeline, "execute", dies_half_way)
    return calls
