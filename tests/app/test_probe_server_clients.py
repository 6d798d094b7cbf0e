"""The probe listener against clients that misbehave, over real sockets: clients that leave
before their answer, methods and paths it does not serve, malformed requests, heads sent a
byte at a time, and hundreds of connections that never finish their head."""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time
from collections.abc import Iterator

import httpx
import orjson
import pytest

from app import metrics
from app.probe_server import ProbeServer


def _start(**options: float) -> ProbeServer:
    return ProbeServer(
        "127.0.0.1",
        0,
        livez=lambda: (200, {"status": "ok"}),
        readyz=lambda: (200, {"status": "ready"}),
        **options,  # type: ignore[arg-type]
    ).start()


@pytest.fixture
def probe() -> Iterator[ProbeServer]:
    server = _start()
    yield server
    server.stop()


def _connect(server: ProbeServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=10)


def _read_answer(conn: socket.socket, head_only: bool = False) -> tuple[int, dict[str, str], bytes]:
    """One answer off `conn`: status, headers (lower-case names) and the content-length body."""
    raw = b""
    while b"\r\n\r\n" not in raw:
        chunk = conn.recv(65536)
        assert chunk, f"connection closed before a full head: {raw!r}"
        raw += chunk
    head, rest = raw.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, value = line.split(":", 1)
        headers[name.strip().lower()] = value.strip()
    length = 0 if head_only else int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = conn.recv(65536)
        assert chunk, "connection closed inside the body"
        rest += chunk
    assert len(rest) == length, (status, headers, rest)  # nothing more than announced
    return status, headers, rest


def _ask(
    server: ProbeServer, request: bytes, head_only: bool = False
) -> tuple[int, dict[str, str], bytes]:
    with _connect(server) as conn:
        conn.sendall(request)
        return _read_answer(conn, head_only)


def _json_error(answer: tuple[int, dict[str, str], bytes]) -> dict[str, object]:
    _, headers, body = answer
    assert headers["content-type"] == "application/json", answer
    detail = orjson.loads(body)
    assert isinstance(detail, dict) and isinstance(detail.get("detail"), str), answer
    return detail


def _closed(conn: socket.socket, within_s: float) -> bool:
    """Whether the server closes `conn` within `within_s` (what it sends before is ignored)."""
    conn.settimeout(within_s)
    try:
        while conn.recv(65536):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


def test_clients_leaving_before_their_answer_log_nothing(
    probe: ProbeServer, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    # The trial's reproduction: 20 clients send a request and close without reading the answer
    # (a broken pipe on the server's write); 20 more reset the connection (SO_LINGER 0).
    caplog.set_level(logging.DEBUG, logger="app.probe_server")
    for abort in (False, True) * 20:
        conn = _connect(probe)
        if abort:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        conn.close()
    time.sleep(1.0)  # the handler threads write into the closed connections meanwhile
    assert httpx.get(f"http://127.0.0.1:{probe.port}/livez", timeout=5).status_code == 200
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception occurred" not in err, err[:3000]
    loud = [r for r in caplog.records if r.levelno > logging.DEBUG]
    assert not loud, [r.getMessage() for r in loud]


def test_a_real_error_is_still_logged(
    probe: ProbeServer, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An answer that cannot be written (a bug, not a client going away) keeps its traceback.
    monkeypatch.setattr(metrics, "exposition", lambda: ("a str, not bytes", "text/plain"))
    with caplog.at_level(logging.ERROR, logger="app.probe_server"):
        with _connect(probe) as conn:
            conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            assert _closed(conn, within_s=5)
        deadline = time.monotonic() + 5
        while not caplog.records and time.monotonic() < deadline:
            time.sleep(0.05)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors and errors[0].exc_info and errors[0].exc_info[0] is TypeError, errors


def test_other_methods_and_paths_answer_json(probe: ProbeServer) -> None:
    status, headers, _ = answer = _ask(
        probe, b"POST /rerank HTTP/1.1\r\nHost: x\r\ncontent-length: 2\r\n\r\n{}"
    )
    assert status == 404 and _json_error(answer) == {"detail": "Not Found"}
    for method in (b"POST", b"PUT", b"DELETE", b"OPTIONS", b"PROPFIND"):
        for path in (b"/livez", b"/readyz", b"/metrics?x=1"):
            status, headers, _ = answer = _ask(
                probe, b"%s %s HTTP/1.1\r\nHost: x\r\n\r\n" % (method, path)
            )
            assert status == 405 and headers["allow"] == "GET, HEAD", answer
            assert _json_error(answer) == {"detail": "Method Not Allowed"}
    with httpx.Client(base_url=f"http://127.0.0.1:{probe.port}", timeout=5) as client:
        refused = client.post("/livez", json={"a": 1})
        assert refused.status_code == 405 and refused.json() == {"detail": "Method Not Allowed"}
        assert client.get("/nope").json() == {"detail": "Not Found"}


def test_malformed_requests_answer_json(probe: ProbeServer) -> None:
    status, _, _ = answer = _ask(probe, b"GARBAGE\r\n\r\n")
    assert status == 400 and _json_error(answer)
    status, _, _ = answer = _ask(probe, b"GET /livez HTTP/9.9\r\n\r\n")
    assert status in (400, 505) and _json_error(answer)
    status, _, _ = answer = _ask(probe, b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n")
    assert status == 414 and _json_error(answer)
    status, _, _ = answer = _ask(
        probe, b"GET /livez HTTP/1.1\r\nx-big: " + b"a" * 70_000 + b"\r\n\r\n"
    )
    assert status == 431 and _json_error(answer)
    many = b"".join(b"x-%d: 1\r\n" % i for i in range(150))
    status, _, _ = answer = _ask(probe, b"GET /livez HTTP/1.1\r\n" + many + b"\r\n")
    assert status == 431 and _json_error(answer)


def test_head_answers_have_no_body_and_keep_the_connection(probe: ProbeServer) -> None:
    with _connect(probe) as conn:
        for path, status in ((b"/livez", 200), (b"/readyz", 200), (b"/metrics", 200), (b"/x", 404)):
            conn.sendall(b"HEAD %s HTTP/1.1\r\nHost: x\r\n\r\n" % path)
            answer = _read_answer(conn, head_only=True)
            assert answer[0] == status and answer[2] == b"", answer
        conn.sendall(
            b"HEAD /livez HTTP/1.1\r\nHost: x\r\n\r\nGET /livez HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        # Both answers may come in one read: the HEAD's head is followed at once by the GET's.
        raw = b""
        while not raw.endswith(b'{"status":"ok"}'):
            chunk = conn.recv(65536)
            assert chunk, raw
            raw += chunk
        first, second = raw.split(b"\r\n\r\n", 1)
        assert first.startswith(b"HTTP/1.1 200") and second.startswith(b"HTTP/1.1 200"), raw
        assert second.endswith(b'\r\n\r\n{"status":"ok"}'), raw


def test_a_head_dribbled_a_byte_at_a_time_is_cut_off() -> None:
    server = _start(head_timeout_s=1.0)
    try:
        with _connect(server) as conn:
            conn.settimeout(0.5)
            started = time.monotonic()
            answer, closed = b"", False
            for byte in b"GET /livez HTTP/1.1\r\nHost: " + b"x" * 200:
                try:
                    conn.send(bytes([byte]))
                    chunk = conn.recv(65536)  # the 0.5 s between two bytes
                except TimeoutError:
                    continue
                except OSError:
                    closed = True
                    break
                if not chunk:
                    closed = True
                    break
                answer += chunk
                if time.monotonic() - started > 8:
                    break
            took = time.monotonic() - started
        assert closed, answer
        assert took < 6, took  # 1 s allowed: generous for a loaded machine
        assert answer.startswith(b"HTTP/1.1 408"), answer
        assert answer.endswith(b'{"detail":"request headers not received in time"}'), answer
    finally:
        server.stop()


def test_an_idle_connection_is_closed_and_a_prompt_one_kept() -> None:
    server = _start(head_timeout_s=1.0)
    try:
        with _connect(server) as conn:
            for _ in range(3):  # keep-alive: each request well within the timeout
                conn.sendall(b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")
                assert _read_answer(conn)[0] == 200
                time.sleep(0.3)
            started = time.monotonic()
            assert _closed(conn, within_s=8)
            assert time.monotonic() - started < 6
        with _connect(server) as idle:  # never a byte: closed without an answer
            idle.settimeout(8)
            assert idle.recv(100) == b""
    finally:
        server.stop()


def test_hundreds_of_unfinished_heads_do_not_starve_probes(probe: ProbeServer) -> None:
    before = threading.active_count()
    hostile: list[socket.socket] = []
    try:
        started = time.monotonic()
        for _ in range(500):
            # socketserver's listen backlog of 5 dropped SYNs here: 1 s retransmissions
            assert time.monotonic() - started < 15, f"{len(hostile)} connections in 15 s"
            conn = _connect(probe)
            conn.sendall(b"GET /livez HTTP/1.1\r\nHost: x\r\n")  # the head never ends
            hostile.append(conn)
        url = f"http://127.0.0.1:{probe.port}/livez"
        for _ in range(5):
            started = time.monotonic()
            assert httpx.get(url, timeout=5).status_code == 200
            assert time.monotonic() - started < 3
        # A thread per connection, but not one per hostile connection (a pod's process limit).
        deadline = time.monotonic() + 3
        while threading.active_count() - before > 100 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert threading.active_count() - before <= 100, threading.active_count() - before
    finally:
        for conn in hostile:
            conn.close()
