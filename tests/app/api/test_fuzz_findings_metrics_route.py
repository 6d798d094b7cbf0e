"""Fuzz trial finding: answers the service middleware gives before routing (413, 415, 501,
408 to POST /rerank) were counted under route="unmatched", so an alert on /rerank's errors by
route missed them. They carry the template of the route their path matches; a path no route
matches stays "unmatched" (a client cannot add label values)."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import Iterator

import orjson
import pytest
from fastapi.testclient import TestClient

from app.api.middleware import ServiceMiddleware
from tests.app.api.conftest import NF, ClientFactory

ONE = orjson.dumps({"candidates": [{"id": "a", "features": [0.1] * NF}]})


def _value(client: TestClient, series: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return 0.0


def _counted(client: TestClient, route: str, status: int, method: str = "POST") -> float:
    return _value(
        client, f'ltr_http_requests_total{{method="{method}",route="{route}",status="{status}"}}'
    )


def _timed(client: TestClient, route: str, status: int) -> float:
    return _value(
        client,
        f'ltr_http_request_duration_seconds_count{{method="POST",route="{route}",status="{status}"}}',
    )


def _big_chunks() -> Iterator[bytes]:
    big = b'{"pad": "' + b"x" * 70_000 + b'"}'
    for i in range(0, len(big), 4096):
        yield big[i : i + 4096]


@pytest.mark.parametrize(
    ("status", "send"),
    [
        (415, {"content": b"{}", "headers": {"content-encoding": "gzip"}}),
        (415, {"content": gzip.compress(ONE), "headers": {"content-encoding": "br"}}),
        (413, {"content": b"x" * 70_000}),
        (413, {"content": _big_chunks}),  # chunked, cut off while streaming
        (501, {"content": b"{}", "headers": {"transfer-encoding": "gzip, chunked"}}),
    ],
)
@pytest.mark.parametrize("path", ["/rerank", "/feedback"])
def test_answers_before_routing_count_under_their_route(
    shared_client: TestClient, status: int, send: dict, path: str
) -> None:
    if callable(send.get("content")):
        send = {**send, "content": send["content"]()}
    before = _counted(shared_client, path, status), _timed(shared_client, path, status)
    unmatched = _counted(shared_client, "unmatched", status)
    resp = shared_client.post(path, **send)
    assert resp.status_code == status, resp.text
    assert _counted(shared_client, path, status) == before[0] + 1
    assert _timed(shared_client, path, status) == before[1] + 1
    assert _counted(shared_client, "unmatched", status) == unmatched


def test_a_method_the_route_lacks_still_counts_under_it(shared_client: TestClient) -> None:
    """As routing would: a PUT /rerank is the route's 405, so its 415 is the route's too."""
    before = _counted(shared_client, "/rerank", 415, "PUT")
    headers = {"content-encoding": "gzip"}
    assert shared_client.put("/rerank", content=b"{}", headers=headers).status_code == 415
    assert _counted(shared_client, "/rerank", 415, "PUT") == before + 1


def test_a_path_no_route_matches_stays_unmatched(shared_client: TestClient) -> None:
    before = _counted(shared_client, "unmatched", 415)
    for path in ("/rerank-nope-1234", "/rerank/", "/zz/unknown-5678"):
        resp = shared_client.post(path, content=b"{}", headers={"content-encoding": "gzip"})
        assert resp.status_code == 415
    assert _counted(shared_client, "unmatched", 415) == before + 3
    text = shared_client.get("/metrics").text
    assert "nope-1234" not in text and "unknown-5678" not in text


def test_the_docs_assets_count_under_their_mount(shared_client: TestClient) -> None:
    """Before: every file of the /docs page counted as "unmatched" (a docs trial). Under the
    mount's path, one label whatever file a client asks for."""
    before = _counted(shared_client, "/docs-assets", 200, "GET")
    missing = _counted(shared_client, "/docs-assets", 404, "GET")
    assert shared_client.get("/docs-assets/swagger-ui.css").status_code == 200
    assert shared_client.get("/docs-assets/nope-4321.js").status_code == 404
    assert _counted(shared_client, "/docs-assets", 200, "GET") == before + 1
    assert _counted(shared_client, "/docs-assets", 404, "GET") == missing + 1
    assert "nope-4321" not in shared_client.get("/metrics").text


def test_a_body_not_in_on_time_is_a_408_of_its_route(make_client: ClientFactory) -> None:
    """The 408 comes from the body read timeout: the app is called with a body that never
    ends, on the event loop the TestClient runs it on."""
    with make_client(body_read_timeout_seconds=0.05) as client:
        before = _counted(client, "/rerank", 408), _timed(client, "/rerank", 408)
        sent: list[dict] = []

        async def call() -> None:
            async def receive() -> dict:
                await asyncio.sleep(0.01)
                return {"type": "http.request", "body": b" ", "more_body": True}

            async def send(message: dict) -> None:
                sent.append(message)

            scope = {
                "type": "http",
                "asgi": {"version": "3.0"},
                "http_version": "1.1",
                "method": "POST",
                "scheme": "http",
                "path": "/rerank",
                "raw_path": b"/rerank",
                "root_path": "",
                "query_string": b"",
                "headers": [(b"host", b"testserver"), (b"content-type", b"application/json")],
                "client": ("127.0.0.1", 5000),
                "server": ("testserver", 80),
            }
            await client.app(scope, receive, send)  # type: ignore[arg-type]

        assert client.portal is not None
        client.portal.call(call)
        assert sent[0]["status"] == 408
        assert _counted(client, "/rerank", 408) == before[0] + 1
        assert _timed(client, "/rerank", 408) == before[1] + 1


def test_the_label_is_found_under_the_root_path(shared_client: TestClient) -> None:
    """Served under a root path (`--root-path /ltr`), a shed /rerank was labelled with the
    whole path ("/ltr/rerank"), another series than the routed answers'."""
    middleware = ServiceMiddleware(shared_client.app, max_body_bytes=1)
    app = shared_client.app
    for path, root, label in [
        ("/ltr/rerank", "/ltr", "/rerank"),
        ("/rerank", "", "/rerank"),
        ("/ltr/feedback", "/ltr", "/feedback"),
        ("/ltrx/rerank", "/ltr", "unmatched"),
        ("/openapi.json", "", "/openapi.json"),
        ("/docs-assets/swagger-ui.css", "", "/docs-assets"),
        ("/nope", "", "unmatched"),
    ]:
        scope = {"type": "http", "method": "POST", "path": path, "root_path": root, "app": app}
        assert middleware._route_label(scope) == label, (path, root)
