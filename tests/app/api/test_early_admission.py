"""Admission in the service middleware (app.api.early_admission): a shed /rerank is answered
before routing with the same answers as the route gave (the retrieval order, or the 422 / 404
its ids or model call for), counted under its route; an admitted one is admitted once and its
rows come back however the request ends."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY

from app.api import admission, early_admission, retrieval_order
from tests.app.api.conftest import NF, ClientFactory

SHED_NOW = {"x-request-timeout-ms": "0.001"}  # due before it could be scored


def body(n: int = 4, **extra: Any) -> dict[str, Any]:
    return {"candidates": [{"id": f"d{i}", "features": [0.5] * NF} for i in range(n)], **extra}


def test_a_shed_request_gets_the_retrieval_order_before_routing(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    answered: list[str] = []
    original = retrieval_order.overload_response

    async def spy(request: Any, exc: Exception) -> Any:
        answered.append(request.url.path)
        return await original(request, exc)

    monkeypatch.setattr(early_admission, "overload_response", spy)
    resp = client.post("/rerank", json=body(4, top_k=3), headers=SHED_NOW)
    assert resp.status_code == 200
    answer = resp.json()
    assert [r["id"] for r in answer["results"]] == ["d0", "d1", "d2"]
    assert answer["degraded"] is True and answer["reasons"] in (["over_budget"], ["shed"])
    assert resp.headers["x-request-id"] == answer["request_id"]
    assert answered == ["/rerank"]  # by the middleware, before routing
    metrics = client.get("/metrics").text
    assert 'ltr_http_requests_total{method="POST",route="/rerank",status="200"}' in metrics


@pytest.mark.parametrize(
    ("payload", "status", "kind"),
    [
        ({"candidates": [{"id": "a"}, {"id": "a"}]}, 422, "duplicate_id"),
        ({"candidates": [{"id": 1.5}]}, 422, "id_type"),
        ({"candidates": [{"id": "a"}], "request_id": "a b"}, 422, "string_pattern_mismatch"),
        ({"candidates": [{"id": "a"}], "model": "nope"}, 404, None),
    ],
)
def test_a_shed_request_with_bad_ids_or_model_gets_the_routes_error(
    client: TestClient, payload: dict[str, Any], status: int, kind: str | None
) -> None:
    resp = client.post("/rerank", json=payload, headers=SHED_NOW)
    assert resp.status_code == status, resp.text
    if kind is not None:
        assert resp.json()["detail"][0]["type"] == kind


def _answered_shed() -> float:
    reasons = (admission.SHED, admission.OVER_BUDGET)
    values = (REGISTRY.get_sample_value("ltr_shed_requests_total", {"reason": r}) for r in reasons)
    return sum(v or 0.0 for v in values)


def test_a_shed_request_answered_422_is_not_counted_as_shed(client: TestClient) -> None:
    # A trial: 20 over-budget 200s and 10 over-budget 422s (top_k 0) counted 30 shed.
    before = _answered_shed()
    refused = client.post("/rerank", json=body(4, top_k=0), headers=SHED_NOW)
    assert refused.status_code == 422, refused.text
    assert _answered_shed() == before
    answered = client.post("/rerank", json=body(4), headers=SHED_NOW)
    assert answered.status_code == 200 and answered.json()["degraded"] is True
    assert _answered_shed() == before + 1


def test_a_shed_request_answered_503_is_counted(make_client: ClientFactory) -> None:
    with make_client(overload_response="503") as client:
        before = _answered_shed()
        resp = client.post("/rerank", json=body(4), headers=SHED_NOW)
        assert resp.status_code == 503
        assert _answered_shed() == before + 1


def test_the_503_mode_refuses_a_bad_request_and_says_when_no_retry_would_fit(
    make_client: ClientFactory,
) -> None:
    """Before: a body with top_k 0 got 503 "retry later" (a retry gets the same), and so did a
    request that no idle worker could answer within its budget, with Retry-After each time."""
    with make_client(overload_response="503") as client:
        refused = client.post("/rerank", json=body(4, top_k=0), headers=SHED_NOW)
        assert refused.status_code == 422, refused.text
        over = client.post("/rerank", json=body(4), headers=SHED_NOW)
        assert over.status_code == 503 and "retry-after" not in over.headers
        detail = over.json()["detail"]
        assert detail.startswith("over budget: this request cannot be answered within its")
        assert "0.001 ms budget" in detail and "x-request-timeout-ms (at most 10000)" in detail


def test_a_shed_requests_duplicate_id_is_named_as_a_scored_ones_is(client: TestClient) -> None:
    payload = {"candidates": [{"id": i, "features": {}} for i in ("a", "b", "a")]}
    shed = client.post("/rerank", json=payload, headers=SHED_NOW).json()["detail"][0]
    scored = client.post("/rerank", json=payload).json()["detail"][0]
    assert shed["loc"] == scored["loc"] == ["body", "candidates", 2, "id"]
    assert shed["msg"] == scored["msg"] == "duplicate id 'a' (also candidates[0])"


@pytest.mark.parametrize(
    "payload",
    [
        {"candidates": None},  # shed: "must be a list of candidates"; scored: "field required"
        {"candidates": [{"id": "a", "features": {}}, {"features": {}}]},  # shed: "id_type"
        {"candidates": [{"id": "a", "features": {}}, 7]},
    ],
)
def test_a_shed_request_is_refused_as_a_scored_one_is(
    client: TestClient, payload: dict[str, Any]
) -> None:
    shed = client.post("/rerank", json=payload, headers=SHED_NOW)
    scored = client.post("/rerank", json=payload)
    assert shed.status_code == scored.status_code == 422
    assert shed.json()["detail"] == scored.json()["detail"]


def test_a_bad_budget_header_is_reported_by_the_route(client: TestClient) -> None:
    resp = client.post("/rerank", json=body(), headers={"x-request-timeout-ms": "soon"})
    assert resp.status_code == 422
    assert resp.json()["detail"][0]["loc"] == ["header", "x-request-timeout-ms"]


def test_an_admitted_request_is_admitted_once_and_its_rows_come_back(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    original = admission.admit

    async def counted(*args: Any) -> admission.Slot:
        calls.append(1)
        return await original(*args)

    monkeypatch.setattr(admission, "admit", counted)
    monkeypatch.setattr(early_admission, "admit", counted)
    controller: admission.AdmissionController = client.app.state.admission  # type: ignore[attr-defined]
    resp = client.post("/rerank", json=body())
    assert resp.status_code == 200 and resp.json()["degraded"] is False
    assert calls == [1]
    assert controller.in_flight == 0
    # Admitted, then refused by the route (a feature count the model does not take).
    bad = {"candidates": [{"id": "a", "features": [1.0]}]}
    assert client.post("/rerank", json=bad).status_code == 422
    assert calls == [1, 1]
    assert controller.in_flight == 0


def test_without_admission_control_nothing_is_decided_early(make_client: ClientFactory) -> None:
    with make_client(admission_enabled=False) as client:
        resp = client.post("/rerank", json=body(), headers=SHED_NOW)
        assert resp.status_code == 200 and resp.json()["degraded"] is False


def test_rerank_is_recognised_under_a_root_path() -> None:
    assert admission.is_rerank({"path": "/rerank"})
    assert admission.is_rerank({"path": "/api/rerank", "root_path": "/api"})
    assert not admission.is_rerank({"path": "/api/rerank"})
    assert not admission.is_rerank({"path": "/rerank/x", "root_path": ""})


def test_an_over_budget_request_on_an_idle_worker_does_not_make_it_shedding(
    client: TestClient,
) -> None:
    """Before: any refused request set the shedding window, so one client sending
    `x-request-timeout-ms: 1` about once a second kept /readyz at 503 (the pod out of its
    Service) and shortened every other request's queue."""
    resp = client.post("/rerank", json=body(4), headers=SHED_NOW)
    assert resp.status_code == 200 and resp.json()["reasons"] == ["over_budget"]
    assert client.app.state.admission.shedding is False  # type: ignore[attr-defined]
    assert client.get("/readyz").json() == {"status": "ready"}
