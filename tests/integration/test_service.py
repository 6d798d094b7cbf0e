"""The real service over real sockets: uvicorn in a child process, HTTP from this one."""

from __future__ import annotations

import re
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import orjson
import pytest

from app.artifacts.manifest import new_version_id
from app.artifacts.store import set_current
from app.scoring.reference import predict
from tests.support import feature_names, publish, random_ensemble
from tests.support.redis_server import free_port
from tests.support.uvicorn_server import product_server, uvicorn_server

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NF = 20
TOKEN = "integration-token"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}


def env(registry: Path, **extra: str) -> dict[str, str]:
    return {
        "LTR_REGISTRY": str(registry),
        "LTR_ADMIN_TOKEN": TOKEN,
        "LTR_RELOAD_POLL_SECONDS": "0.2",
        "LTR_MAX_BODY_BYTES": "4000000",
        **extra,
    }


def request_body(rows: np.ndarray, **extra: object) -> bytes:
    cands = [
        {"id": f"d{i}", "features": [None if np.isnan(v) else float(v) for v in row]}
        for i, row in enumerate(rows)
    ]
    return orjson.dumps({"candidates": cands, **extra})


def rows_for(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rows = rng.normal(0, 1, (n, NF)).astype(np.float32)
    rows[rng.random((n, NF)) < 0.1] = np.nan
    rows[: n // 10] = rows[0]  # a few exact ties
    return rows


def reload_failures(client: httpx.Client) -> float:
    text = client.get("/metrics").text
    found = re.search(r'^ltr_model_reload_failures_total\{model="m"\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def test_rerank_orders_exactly_as_offline_scoring(tmp_path: Path) -> None:
    ensemble = random_ensemble(NF, num_trees=60, depth=5, seed=1)
    publish(tmp_path, ensemble)
    scanned = env(tmp_path, LTR_BODY_SCAN="true")  # the default, and the parse it is about
    with uvicorn_server(scanned) as server, httpx.Client(base_url=server.url) as client:
        for n, seed in ((1, 0), (10, 1), (300, 2), (1000, 3)):
            rows = rows_for(n, seed)
            resp = client.post("/rerank", content=request_body(rows))
            assert resp.status_code == 200, resp.text
            offline = predict(ensemble, rows)
            expected = sorted(range(n), key=lambda i: (-offline[i], i))
            results = resp.json()["results"]
            assert [r["id"] for r in results] == [f"d{i}" for i in expected]
            np.testing.assert_allclose(
                [r["score"] for r in results], offline[expected], rtol=1e-6, atol=1e-9
            )
            # The same candidates as name -> value maps (absent names are missing values).
            names = feature_names(NF)
            maps = [{"id": f"d{i}", "features": _present(names, r)} for i, r in enumerate(rows)]
            resp = client.post("/rerank", content=orjson.dumps({"candidates": maps}))
            assert resp.json()["results"] == results


def _present(names: list[str], row: np.ndarray) -> dict[str, float]:
    return {k: float(v) for k, v in zip(names, row.tolist(), strict=True) if v == v}


def test_hot_swap_under_load_never_fails_nor_goes_back(tmp_path: Path) -> None:
    versions = [new_version_id() for _ in range(3)]  # ids sort by creation time
    publish(tmp_path, random_ensemble(NF, seed=10), version=versions[0])
    rows = rows_for(50, 5)
    body = request_body(rows)
    stop = threading.Event()
    errors: list[str] = []

    def hammer() -> list[str]:
        seen: list[str] = []
        with httpx.Client(base_url=server.url, timeout=10) as client:
            while not stop.is_set():
                try:
                    resp = client.post("/rerank", content=body)
                except httpx.HTTPError as exc:
                    errors.append(repr(exc))
                    continue
                if resp.status_code != 200:
                    errors.append(f"{resp.status_code} {resp.text[:200]}")
                    continue
                seen.append(resp.json()["model"]["version"])
        return seen

    settings = env(tmp_path, LTR_RELOAD_POLL_SECONDS="2")
    with uvicorn_server(settings) as server, ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(hammer) for _ in range(4)]
        try:
            time.sleep(0.5)
            publish(tmp_path, random_ensemble(NF, seed=11), version=versions[1])
            resp = httpx.post(server.url + "/admin/reload", headers=ADMIN, timeout=60)
            # Loaded by this trigger, or by a poll that came first while it waited its turn.
            report = resp.json()
            assert report["loaded"] + report["unchanged"] == [{"name": "m", "version": versions[1]}]
            time.sleep(0.5)
            publish(tmp_path, random_ensemble(NF, seed=12), version=versions[2])  # the poll's
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                models = httpx.get(server.url + "/models").json()["models"]
                if models[0]["version"] == versions[2]:
                    break
                time.sleep(0.05)
            time.sleep(0.5)
        finally:
            stop.set()
        seen_by_thread = [f.result() for f in futures]
    assert errors == []
    for seen in seen_by_thread:
        assert seen and seen == sorted(seen), "a client saw a version go backwards"
        assert seen[-1] == versions[2]
    assert {v for seen in seen_by_thread for v in seen} == set(versions)


@pytest.mark.parametrize("damage", ["truncated", "corrupt_manifest"])
def test_a_damaged_artifact_is_refused_and_the_old_one_keeps_serving(
    tmp_path: Path, damage: str
) -> None:
    good = publish(tmp_path, random_ensemble(NF, seed=20), version=new_version_id())
    rows = rows_for(5, 7)
    with uvicorn_server(env(tmp_path)) as server, httpx.Client(base_url=server.url) as client:
        bad = publish(tmp_path, random_ensemble(NF, seed=21), current=False)
        target = tmp_path / "m" / bad / ("model.json" if damage == "truncated" else "manifest.json")
        target.write_bytes(target.read_bytes()[: len(target.read_bytes()) // 2])
        before = reload_failures(client)
        set_current(tmp_path, "m", bad)  # the poll finds it
        deadline = time.monotonic() + 20
        while reload_failures(client) == before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert reload_failures(client) == before + 1
        assert client.get("/readyz").status_code == 200
        resp = client.post("/rerank", content=request_body(rows))
        assert resp.status_code == 200 and resp.json()["model"]["version"] == good
        failed = client.post("/admin/reload", headers=ADMIN).json()["failed"]
        assert failed[0]["version"] == bad
        assert reload_failures(client) == before + 2
        time.sleep(0.5)  # polls meanwhile do not count the same refusal again
        assert reload_failures(client) == before + 2


def test_a_chunked_body_over_the_limit_is_413_before_it_ends(tmp_path: Path) -> None:
    publish(tmp_path, random_ensemble(NF))
    with uvicorn_server(env(tmp_path, LTR_MAX_BODY_BYTES="200000")) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(
                b"POST /rerank HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
            )
            chunk = b"x" * 10_000
            try:
                for _ in range(21):  # 210 kB > 200 kB; the stream is never finished
                    sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server answered and closed before the last chunks: the point
            response = b""
            while b"\r\n\r\n" not in response:
                try:
                    data = sock.recv(65536)
                except ConnectionResetError:
                    break
                if not data:
                    break
                response += data
        assert response.startswith(b"HTTP/1.1 413"), response[:200]
        # A declared length over the limit is refused without sending the body at all.
        resp = httpx.post(server.url + "/rerank", content=b"{" + b" " * 300_000 + b"}")
        assert resp.status_code == 413


def test_a_gzip_body_is_415_and_the_next_request_is_scored(tmp_path: Path) -> None:
    """Over the product's own HTTP protocol: a compressed body is refused with a message
    naming its coding (it used to be a 422 about invalid UTF-8), counted as sent, and the
    client goes on."""
    publish(tmp_path, random_ensemble(NF))
    rows = rows_for(30, seed=4)
    body = request_body(rows)
    server = product_server(env(tmp_path))
    try:
        server.start().wait_ready()
        with httpx.Client(base_url=server.url) as client:
            _gzip_then_plain(client, body)
        _h2c_offer_is_refused(server.port, body)
        _compressed_chunks_are_refused(server.port, body)
    finally:
        server.stop()


def _exchange(port: int, request: bytes) -> bytes:
    """Everything the server sends back for raw `request` bytes, until it closes."""
    answer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(request)
        while chunk := conn.recv(65536):
            answer += chunk
    return answer


def _compressed_chunks_are_refused(port: int, body: bytes) -> None:
    """`Transfer-Encoding: gzip, chunked`: the parser took the chunks off and the compressed
    bytes inside were a 422 "invalid JSON"; a 501 naming the coding (RFC 9112 6.1)."""
    import gzip

    packed = gzip.compress(body)
    answer = _exchange(
        port,
        b"POST /rerank HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: gzip, chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(packed), packed),
    )
    assert answer.startswith(b"HTTP/1.1 501"), answer[:300]
    assert b"Transfer-Encoding 'gzip, chunked' is not supported" in answer, answer[-300:]


def _h2c_offer_is_refused(port: int, body: bytes) -> None:
    """`curl --http2` offers h2c: the HTTP parser then takes the body for the new protocol.
    A 400 that says so, not a 422 calling the valid body an empty document."""
    answer = _exchange(
        port,
        b"POST /rerank HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
        b"HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body),
    )
    assert answer.startswith(b"HTTP/1.1 400"), answer[:300]
    assert b"Upgrade 'h2c' is not supported with a request body" in answer, answer[-300:]


def test_head_probes_answer_without_a_body_and_odd_methods_share_a_label(
    tmp_path: Path,
) -> None:
    """Load balancers and probes may send HEAD; a method a client invents must not add a
    metrics label value."""
    publish(tmp_path, random_ensemble(NF))
    probe_port = free_port()
    server = product_server(env(tmp_path, LTR_PROBE_PORT=str(probe_port)))
    try:
        server.start().wait_ready()
        for port in (server.port, probe_port):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
                for path in ("/livez", "/readyz", "/metrics", "/models")[
                    : 4 if port == server.port else 3
                ]:
                    conn.sendall(b"HEAD %s HTTP/1.1\r\nhost: x\r\n\r\n" % path.encode())
                    head = _read_head(conn)
                    assert head.startswith(b"HTTP/1.1 200"), (port, path, head)
                    assert re.search(rb"content-length: [1-9]", head, re.I), head
                # No body came: the next answer on the connection starts right after the head.
                conn.sendall(b"GET /livez HTTP/1.1\r\nhost: x\r\n\r\n")
                assert _read_head(conn).startswith(b"HTTP/1.1 200")
        with httpx.Client(base_url=server.url) as client:
            for method in ("PROPFIND", "PURGE", "M-SEARCH"):
                assert client.request(method, "/livez").status_code == 405
            metrics = client.get("/metrics").text
        methods = set(re.findall(r'^ltr_http_requests_total\{method="([^"]+)"', metrics, re.M))
        assert methods <= {"GET", "HEAD", "other"} and "other" in methods, methods
        assert re.search(r'^ltr_http_requests_total\{method="HEAD",route="/livez"', metrics, re.M)
    finally:
        server.stop()


def _read_head(conn: socket.socket) -> bytes:
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = conn.recv(1)
        assert chunk, head
        head += chunk
    return head


def _gzip_then_plain(client: httpx.Client, body: bytes) -> None:
    import gzip

    resp = client.post(
        "/rerank",
        content=gzip.compress(body),
        headers={"content-type": "application/json", "content-encoding": "gzip"},
    )
    assert resp.status_code == 415, resp.text
    assert resp.headers["accept-encoding"] == "identity"
    assert "'gzip' is not supported" in resp.json()["detail"]
    scored = client.post("/rerank", content=body)
    assert scored.status_code == 200 and not scored.json()["degraded"]
    metrics = client.get("/metrics").text
    # Refused before routing, as a 413 is: still counted under the route its path matches.
    found = re.search(r'^ltr_http_requests_total\{([^}]*)status="415"\} 1\.0$', metrics, re.M)
    assert found is not None and 'route="/rerank"' in found.group(1), metrics


@pytest.mark.parametrize("status", [b"413", b"503"])
def test_an_answer_before_the_body_reaches_a_client_still_sending_it(
    tmp_path: Path, status: bytes
) -> None:
    """The server answers at once (a body over the limit: 413; over the worker's buffer cap,
    which another upload holds: 503) and closes only once the client has sent its body (a
    lingering close): closing with the body still arriving made the kernel reset the
    connection, and the client lost the answer. `python -m app`: the product's protocol."""
    publish(tmp_path, random_ensemble(NF))
    # 503: the second 3 MB body passes the large bodies' share (3/4) of the 5.4 MB cap.
    limit, cap = ("200000", "1048576") if status == b"413" else ("4000000", "5400000")
    settings = env(tmp_path, LTR_MAX_BODY_BYTES=limit, LTR_MAX_BUFFERED_BODY_BYTES=cap)
    server = product_server(settings)
    port = server.port
    head = (
        b"POST /rerank HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 3000000\r\n\r\n"
    )
    try:
        server.start()
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as holder,
            socket.create_connection(("127.0.0.1", port), timeout=10) as sock,
        ):
            holder.sendall(head)  # reserves 3 MB of the 4 MB cap (large bodies: 75 % of it)
            time.sleep(0.3)
            sock.sendall(head)
            time.sleep(0.3)  # the answer is out before the body is
            for _ in range(30):
                sock.sendall(b" " * 100_000)  # a reset would fail here or lose the answer
            response = b""
            while data := sock.recv(65536):
                response += data
        assert response.startswith(b"HTTP/1.1 " + status), response[:200]
        assert response.endswith(b"}")  # the whole answer, then the server's FIN
    finally:
        server.stop()


SLOW_START = """
import os, sys, time
if "--multiprocessing-fork" in sys.orig_argv:
    time.sleep(float(os.environ.get("TEST_WORKER_START_DELAY_SECONDS", "0")))
"""


def test_workers_slow_to_start_are_not_killed_and_restarted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a loaded 2-core machine each worker took over 5 s to import, and uvicorn's
    supervisor (its ping timeout, 5 s by default) killed and restarted them over and over:
    "Child process [N] died" in the log, and a throttled pod might never come up. Here the
    spawned workers sleep 7 s before Python starts importing, as a loaded machine's did."""
    publish(tmp_path, random_ensemble(NF))
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(SLOW_START)
    monkeypatch.setenv("PYTHONPATH", str(hooks))
    server = product_server(
        {**env(tmp_path), "TEST_WORKER_START_DELAY_SECONDS": "7"},
        workers=2,
    )
    try:
        server.start(timeout=120).wait_ready(120)
        time.sleep(2)  # a kill would follow a missed ping at once
        log = server.log()
        assert "died" not in log and log.count("Started server process") == 2, log
    finally:
        assert server.stop() == 0, server.log()


def test_python_m_app_serves_with_two_workers(tmp_path: Path) -> None:
    publish(tmp_path, random_ensemble(NF))
    server = product_server(env(tmp_path), workers=2)
    try:
        server.start().wait_ready()
        # /readyz answered by one worker says nothing of the other: wait until fresh
        # connections (spread over both workers by the kernel) all find a loaded model.
        deadline = time.monotonic() + 120
        streak = 0
        while streak < 20:
            assert time.monotonic() < deadline, server.log()
            ready = httpx.get(f"{server.url}/readyz").status_code == 200
            streak = streak + 1 if ready else 0
            if not ready:
                time.sleep(0.2)
        with httpx.Client(base_url=server.url) as client:
            for _ in range(20):
                resp = client.post("/rerank", content=request_body(rows_for(3, 1)))
                assert resp.status_code == 200, resp.text
    finally:
        assert server.stop() == 0, server.log()
