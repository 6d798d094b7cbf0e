"""Answers the HTTP protocol writes itself (408 for a head not in on time, 400 for bytes it
cannot parse) are in `ltr_http_requests_total` as clients received them, under the route their
path matches once the request target was read whole, with one worker and with two
(prometheus-client's multiprocess mode), over real HTTP."""

from __future__ import annotations

import re
import socket
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.support import publish, random_ensemble
from tests.support.uvicorn_server import product_server

pytestmark = [pytest.mark.integration]

HEAD_TIMEOUT_S = 0.5
RERANK_HEAD = b"POST /rerank HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
# (what a client sends and then waits, its answer, and how /metrics counts it)
CLIENTS = [
    (b"", ("unmatched", "other", "408")),  # a connection that sends nothing
    (b"POST /rer", ("unmatched", "POST", "408")),  # the target cut short
    (b"POST /rerank HTTP/1.1\r\nhost: x\r\n", ("/rerank", "POST", "408")),
    (b"GET /models HTTP/1", ("/models", "GET", "408")),  # the target read whole
    (RERANK_HEAD + b"content-length: 100\r\n\r\n{", ("/rerank", "POST", "408")),  # the body's
    (b"GET /livez HTTP/1.1\r\nbad header\r\n\r\n", ("/livez", "GET", "400")),
    (b"GET /livez\x7f HTTP/1.1\r\n\r\n", ("unmatched", "GET", "400")),
    (b"GET /livez HTTP/1.1\r\nhost: x\r\ncontent-length: z\r\n\r\n", ("/livez", "GET", "400")),
    # A chunked body the parser refuses: its route was answering (499 before: "client left").
    (RERANK_HEAD + b"transfer-encoding: chunked\r\n\r\nzz\r\n", ("/rerank", "POST", "400")),
]
_SAMPLE = re.compile(r"^ltr_http_requests_total\{(.*)\} (\S+)$", re.M)


def _counts(url: str) -> Counter[tuple[str, str, str]]:
    counts: Counter[tuple[str, str, str]] = Counter()
    for labels, value in _SAMPLE.findall(httpx.get(url + "/metrics", timeout=10).text):
        found = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        counts[(found["route"], found["method"], found["status"])] += int(float(value))
    return counts


def _answer(port: int, sent: bytes) -> str:
    """The status the server answered `sent` with, read until it closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        if sent:
            conn.sendall(sent)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    return answer.split(b" ", 2)[1].decode() if answer else "nothing"


def _first_status(port: int, sent: bytes) -> str:
    """The status of the first answer to `sent` (the connection may stay open)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(sent)
        answer = b""
        while b"\r\n" not in answer and (chunk := conn.recv(65536)):
            answer += chunk
    return answer.split(b" ", 2)[1].decode() if answer else "nothing"


@pytest.mark.parametrize("workers", [1, 2])
def test_what_the_protocol_answers_itself_is_counted_as_sent(tmp_path: Path, workers: int) -> None:
    publish(tmp_path / "registry", random_ensemble(3, seed=0), version="v1")
    env = {
        "LTR_REGISTRY": str(tmp_path / "registry"),
        "LTR_HEADER_READ_TIMEOUT_SECONDS": str(HEAD_TIMEOUT_S),
        "LTR_BODY_READ_TIMEOUT_SECONDS": str(HEAD_TIMEOUT_S),
        "LTR_RELOAD_POLL_SECONDS": "0",
    }
    server = product_server(env, workers=workers).start().wait_ready()
    try:
        before = _counts(server.url)
        with ThreadPoolExecutor(len(CLIENTS)) as pool:
            statuses = list(pool.map(lambda c: _answer(server.port, c[0]), CLIENTS))
        assert statuses == [status for _, (_, _, status) in CLIENTS]
        expected = Counter(label for _, label in CLIENTS)
        end = time.monotonic() + 10
        while True:  # a body's 400 is counted when its request's task sees the close
            after = _counts(server.url)
            counted = Counter({k: after[k] - before[k] for k in expected})
            if counted == expected or time.monotonic() > end:
                break
            time.sleep(0.05)
    finally:
        server.stop()
    assert counted == expected


def test_a_flood_of_malformed_requests_writes_one_log_line(tmp_path: Path) -> None:
    """uvicorn warned once per malformed request: a client wrote 5,000 lines a second, and
    only --log-level error (which hides the service's own warnings) quieted it."""
    publish(tmp_path / "registry", random_ensemble(3, seed=0), version="v1")
    env = {"LTR_REGISTRY": str(tmp_path / "registry"), "LTR_RELOAD_POLL_SECONDS": "0"}
    server = product_server(env).start().wait_ready()
    try:
        for _ in range(200):
            assert _answer(server.port, b"GET /livez\x7f HTTP/1.1\r\n\r\n") == "400"
        assert httpx.get(server.url + "/livez", timeout=10).status_code == 200
    finally:
        server.stop()
    assert server.log().count("Invalid HTTP request received.") == 1


def test_websocket_upgrades_are_answered_as_http_and_logged_once(tmp_path: Path) -> None:
    """The service has no WebSocket route: uvicorn upgraded each such request anyway and wrote
    its refusal at info, once per request, past the throttle of its warnings."""
    publish(tmp_path / "registry", random_ensemble(3, seed=0), version="v1")
    env = {"LTR_REGISTRY": str(tmp_path / "registry"), "LTR_RELOAD_POLL_SECONDS": "0"}
    server = product_server(env).start().wait_ready()
    upgrade = (
        b"GET /%s HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\nupgrade: websocket\r\n"
        b"sec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        b"content-length: 0\r\n\r\n"
    )
    try:
        statuses = Counter(
            _first_status(server.port, upgrade.replace(b"%s", path))
            for path in [b"livez", b"ws"] * 100
        )
        assert httpx.get(server.url + "/livez", timeout=10).status_code == 200
    finally:
        server.stop()
    assert statuses == {"200": 100, "404": 100}
    log = server.log()
    assert "WebSocket" not in log  # nor uvicorn's advice to install a WebSocket library
    assert log.count("Unsupported upgrade request.") == 1


def _pipelined(port: int, count: int, path: bytes = b"/livez") -> tuple[int, bool]:
    """(how many answers came back, whether the server closed) for `count` requests written
    on one connection at once, read afterwards."""
    request = b"GET " + path + b" HTTP/1.1\r\nhost: x\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(request * count)
        answer, closed = b"", False
        while answer.count(b"HTTP/1.1 ") < count:
            try:
                chunk = conn.recv(65536)
            except ConnectionResetError:
                closed = True
                break
            if not chunk:
                closed = True
                break
            answer += chunk
    return answer.count(b"HTTP/1.1 "), closed


def test_a_connection_queueing_too_many_requests_is_closed(tmp_path: Path) -> None:
    """uvicorn queues pipelined requests without bound, reading on at every answer: one client
    writing requests without reading the answers took a worker from 278 MB to 1.3 GB in 10 s
    (a held-out review). A client pipelining within LTR_MAX_PIPELINED gets every answer."""
    publish(tmp_path / "registry", random_ensemble(3, seed=0), version="v1")
    env = {
        "LTR_REGISTRY": str(tmp_path / "registry"),
        "LTR_RELOAD_POLL_SECONDS": "0",
        "LTR_MAX_PIPELINED": "20",
    }
    server = product_server(env).start().wait_ready()
    try:
        assert _pipelined(server.port, 20) == (20, False)
        answered, closed = _pipelined(server.port, 5000, b"/nowhere")
        assert closed and answered <= 21
        assert httpx.get(server.url + "/livez", timeout=10).status_code == 200
        metrics = httpx.get(server.url + "/metrics", timeout=10).text
    finally:
        server.stop()
    assert 'ltr_slow_client_rejections_total{reason="pipelined"} 1.0' in metrics
