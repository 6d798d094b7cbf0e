"""The access log (`LTR_ACCESS_LOG=true`) over real HTTP: one line per request with the
status really sent, its duration and the request id the answer carried (uvicorn's own line
has no request id, so a caller's id could not find its request in the log)."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import httpx
import orjson
import pytest

from tests.support import publish, random_ensemble
from tests.support.uvicorn_server import product_server

pytestmark = [pytest.mark.integration]
LINE = re.compile(
    r'INFO: +app\.access: 127\.0\.0\.1:\d+ - "(\S+) (\S+) HTTP/1\.1" (\d+) ([\d.]+) ms '
    r"request_id=(\S+)$"
)


def _lines(log: str) -> list[tuple[str, str, int, str]]:
    found = []
    for line in log.splitlines():
        match = LINE.search(line)
        if match:
            method, target, status, _, request_id = match.groups()
            found.append((method, target, int(status), request_id))
    return found


def _request_lines(log: str) -> list[tuple[str, str, int, str]]:
    """The lines but the start-up waits' polls of /livez and /readyz."""
    return [line for line in _lines(log) if line[1] not in ("/livez", "/readyz")]


def test_each_request_is_logged_with_the_id_its_answer_carried(tmp_path: Path) -> None:
    publish(tmp_path / "registry", random_ensemble(3, seed=0), version="v1")
    env = {"LTR_REGISTRY": str(tmp_path / "registry"), "LTR_ACCESS_LOG": "true"}
    server = product_server(env).start().wait_ready()
    try:
        with httpx.Client(base_url=server.url) as client:
            body = {
                "request_id": "from-the-body",
                "candidates": [{"id": "a", "features": [1, 2, 3]}],
            }
            scored = client.post("/rerank", content=orjson.dumps(body))
            bad = client.post("/rerank", content=b"{", headers={"x-request-id": "caller-7"})
            probe = client.get("/livez?verbose=1", headers={"x-request-id": "bad id!"})
        assert scored.status_code == 200 and bad.status_code == 422
    finally:
        server.stop()
    # Read after the graceful stop: a line is written once its answer has gone out, so a
    # read right after the last answer can miss it.
    lines = _request_lines(server.log())
    assert lines == [
        ("POST", "/rerank", 200, "from-the-body"),
        ("POST", "/rerank", 422, "caller-7"),
        ("GET", "/livez?verbose=1", probe.status_code, probe.headers["x-request-id"]),
    ]
    assert scored.headers["x-request-id"] == "from-the-body"
    # uvicorn's own access line (without the id) is not written as well.
    assert '"POST /rerank HTTP/1.1" 200\n' not in server.log()


def test_the_protocols_own_answers_are_logged(tmp_path: Path) -> None:
    """A 408 for a head not sent in time and a 400 for bytes the parser refuses are written
    by the HTTP protocol, before the app: they had no line."""
    publish(tmp_path / "registry", random_ensemble(3, seed=0), version="v1")
    env = {
        "LTR_REGISTRY": str(tmp_path / "registry"),
        "LTR_ACCESS_LOG": "true",
        "LTR_HEADER_READ_TIMEOUT_SECONDS": "0.5",
    }
    server = product_server(env).start().wait_ready()
    host, port = server.url.removeprefix("http://").split(":")
    try:
        with socket.create_connection((host, int(port)), timeout=5) as slow:
            slow.sendall(b"GET /models HTTP/1.1\r\nHost: x\r\n")  # and no more
            assert slow.recv(100).startswith(b"HTTP/1.1 408")
        with socket.create_connection((host, int(port)), timeout=5) as bad:
            bad.sendall(b"GET /models HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n")
            assert bad.recv(100).startswith(b"HTTP/1.1 400")
        with socket.create_connection((host, int(port)), timeout=5) as silent:
            assert silent.recv(100).startswith(b"HTTP/1.1 408")
    finally:
        server.stop()
    lines = _request_lines(server.log())  # after the stop: the lines follow the answers
    assert lines == [
        ("GET", "/models", 408, "-"),
        ("GET", "/models", 400, "-"),
        ("-", "-", 408, "-"),
    ]
