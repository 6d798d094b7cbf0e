"""POST /rerank reaches its endpoint without the framework's routing (app.api.direct_rerank):
answers, errors, the metrics label and the admission slot as when the framework routed it;
everything else is still routed by the framework."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from app.api import admission, routes
from app.main import create_app
from tests.app.api.conftest import NF, app_settings, wait_ready


def body(n: int = 3, **extra: Any) -> dict[str, Any]:
    rows = [{"id": f"d{i}", "features": [0.1 * i] * NF} for i in range(n)]
    return {"candidates": rows, **extra}


@pytest.fixture
def unrouted(registry_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    """A client whose framework routes fail: only what skips them can answer."""
    app = create_app(app_settings(registry=registry_dir))
    with TestClient(app, raise_server_exceptions=False) as client:
        wait_ready(client)

        async def routed(self: APIRoute, *args: Any) -> None:
            raise AssertionError(f"{self.path} was routed by the framework")

        monkeypatch.setattr(APIRoute, "handle", routed)
        yield client


def test_rerank_answers_without_the_frameworks_routing(unrouted: TestClient) -> None:
    resp = unrouted.post("/rerank", json=body(3, top_k=2, request_id="r-1"))
    assert resp.status_code == 200, resp.text
    answer = resp.json()
    assert len(answer["results"]) == 2 and answer["request_id"] == "r-1"
    assert resp.headers["x-request-id"] == "r-1"
    assert unrouted.get("/models").status_code == 500  # the framework's routes do fail here
    assert unrouted.app.state.admission.in_flight == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("payload", "headers", "status", "loc"),
    [
        ({"candidates": [{"id": "a", "features": [0] * NF}] * 2}, {}, 422, None),
        ({"candidates": "no"}, {}, 422, ["body", "candidates"]),
        (body(top_k=0), {}, 422, ["body", "top_k"]),
        (body(), {"x-request-timeout-ms": "soon"}, 422, ["header", "x-request-timeout-ms"]),
        (body(model="nope"), {}, 404, "nope"),
    ],
)
def test_errors_get_the_apps_own_answers(
    unrouted: TestClient,
    payload: dict[str, Any],
    headers: dict[str, str],
    status: int,
    loc: list[Any] | str | None,
) -> None:
    resp = unrouted.post("/rerank", json=payload, headers=headers)
    assert resp.status_code == status, resp.text
    detail = resp.json()["detail"]
    if isinstance(loc, list):
        assert detail[0]["loc"] == loc
    elif loc is None:
        assert detail[0]["type"] == "duplicate_id"
    else:
        assert loc in detail
    assert unrouted.app.state.admission.in_flight == 0  # type: ignore[attr-defined]


def test_a_bug_is_a_500_naming_the_request_and_the_slot_comes_back(
    unrouted: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*args: Any) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(routes, "_rank", broken)
    resp = unrouted.post("/rerank", json=body(), headers={"x-request-id": "bug-7"})
    assert resp.status_code == 500
    assert resp.json() == {"detail": "internal error (request id bug-7)"}
    assert unrouted.app.state.admission.in_flight == 0  # type: ignore[attr-defined]
    monkeypatch.undo()  # the framework's routes back, for /metrics
    metrics = unrouted.get("/metrics")
    assert metrics.status_code == 200
    assert 'ltr_http_requests_total{method="POST",route="/rerank",status="500"}' in metrics.text


def test_other_methods_and_paths_are_left_to_the_framework(client: TestClient) -> None:
    assert client.get("/rerank").status_code == 405
    assert client.post("/rerank/x", json=body()).status_code == 404
    ok = client.post("/rerank", json=body())
    assert ok.status_code == 200
    metrics = client.get("/metrics").text
    assert 'ltr_http_requests_total{method="POST",route="/rerank",status="200"}' in metrics


def test_the_admission_dependency_is_what_the_direct_path_uses() -> None:
    # The endpoint is declared with AdmissionDep; the direct path gives it the same slot.
    route = next(r for r in routes.router.routes if getattr(r, "path", "") == "/rerank")
    assert isinstance(route, APIRoute)
    names = {d.call for d in route.dependant.dependencies}
    assert admission.admitted in names
