"""The real service in a child process: `uvicorn app.main:create_app --factory` on a free port.

Settings go in as `LTR_*` environment variables (the parent's own `LTR_*` are dropped, so the
test says everything). `start()` returns once `/livez` answers; `wait_ready()` waits for
`/readyz`; `stop()` sends SIGTERM (uvicorn's graceful shutdown) and kills the process group
only if it does not exit in time.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.support.redis_server import free_port

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0


class UvicornServer:
    def __init__(
        self,
        env: Mapping[str, str],
        workers: int = 1,
        port: int | None = None,
        command: Sequence[str] | None = None,
    ) -> None:
        self.port = port or free_port()
        self.workers = workers
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("LTR_")}
        self.env.update(env)
        self.env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
        )
        self.command = list(command) if command is not None else self._uvicorn_command()
        self.workdir = Path(tempfile.mkdtemp(prefix="ltr-uvicorn-"))
        # Removed when the server object goes (its log stays readable after stop()).
        weakref.finalize(self, shutil.rmtree, self.workdir, ignore_errors=True)
        self.log_path = self.workdir / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def _uvicorn_command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "uvicorn",
            "app.main:create_app",
            "--factory",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            str(self.workers),
            "--log-level",
            "warning",
        ]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def start(self, timeout: float = START_TIMEOUT_S) -> UvicornServer:
        with open(self.log_path, "wb") as log:
            # Own session: a stuck server (and its workers) can be killed as one group.
            self.proc = subprocess.Popen(
                self.command,
                env=self.env,
                cwd=self.workdir,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._wait_for("/livez", timeout)
        return self

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> UvicornServer:
        self._wait_for("/readyz", timeout)
        return self

    def _wait_for(self, path: str, timeout: float) -> None:
        assert self.proc is not None
        end = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.url + path, timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > end:
                self.stop()
                raise RuntimeError(f"{path} not 200 within {timeout} s:\n{self.log()}")
            time.sleep(0.05)

    def stop(self) -> int | None:
        """Graceful stop; the exit code (None if it had to be killed)."""
        if self.proc is None:
            return None
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                return proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=STOP_TIMEOUT_S)
                return None
        return proc.returncode


@contextmanager
def uvicorn_server(
    env: Mapping[str, str], workers: int = 1, ready: bool = True
) -> Iterator[UvicornServer]:
    """A server for one test. The compiled body scan is off unless `env` turns it on: its load
    (numba's import and first use) adds 2-3 s to every start, which the tests about parsing
    pay (tests/integration/test_service.py serves with it, as do the demo server and
    `python -m app`); the others serve through the full decode, the scan's own fallback."""
    server = UvicornServer({"LTR_BODY_SCAN": "false", **env}, workers=workers).start()
    try:
        if ready:
            server.wait_ready()
        yield server
    finally:
        server.stop()


def product_server(env: Mapping[str, str], workers: int = 1) -> UvicornServer:
    """`python -m app` on a free port: the product's own HTTP protocol (request-head timeout,
    body read-ahead, one copy of a body) and event loop, as `ltr serve` runs it."""
    port = free_port()
    settings = {
        **env,
        "LTR_HOST": "127.0.0.1",
        "LTR_PORT": str(port),
        "LTR_WORKERS": str(workers),
    }
    return UvicornServer(settings, workers, port, command=[sys.executable, "-m", "app"])
