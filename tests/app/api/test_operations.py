"""Health, metrics, model listing, admin reload, OpenAPI."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.api.admission import OVER_BUDGET, SHED
from tests.app.api.conftest import NF, TOKEN, ClientFactory
from tests.support import publish, random_ensemble

ONE = {"candidates": [{"id": "a", "features": [0.1] * NF}]}


def test_readyz_turns_200_once_a_model_is_loaded(
    make_client: ClientFactory, tmp_path: Path
) -> None:
    root = tmp_path / "later"
    with make_client(ready=False, registry=root) as client:
        assert client.get("/livez").json() == {"status": "ok"}
        resp = client.get("/readyz")
        assert resp.status_code == 503 and resp.json() == {
            "status": "not ready",
            "detail": "no model loaded yet: the registry directory does not exist",
        }
        publish(root, random_ensemble(NF), version="v1")
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert client.post("/admin/reload", headers=auth).json()["loaded"] == [
            {"name": "m", "version": "v1"}
        ]
        # Also ready once the compiled body scans are loaded, which a test run alone (a cold
        # process) is still doing here: "loading the compiled body scans" until then.
        deadline = time.monotonic() + 120
        while (ready := client.get("/readyz").json()) != {"status": "ready"}:
            assert ready == {"status": "not ready", "detail": "loading the compiled body scans"}
            assert time.monotonic() < deadline
            time.sleep(0.05)


@pytest.mark.parametrize("module", ["body_scan", "retrieval_order", "item_lookup"])
def test_readyz_waits_for_the_compiled_body_scans(
    make_client: ClientFactory, monkeypatch: pytest.MonkeyPatch, module: str
) -> None:
    """Their load holds the GIL in spurts: a worker is ready once they are done (or failed)."""
    from app.api import body_scan, retrieval_order
    from app.features import item_lookup

    kernel = {
        "body_scan": body_scan.KERNEL,
        "retrieval_order": retrieval_order.KERNEL,
        "item_lookup": item_lookup.KERNEL,
    }[module]
    monkeypatch.setattr(kernel, "_settled", threading.Event())  # still loading
    monkeypatch.setattr(kernel, "_started", True)  # no second compile
    with make_client(ready=False) as client:
        loading = {"status": "not ready", "detail": "loading the compiled body scans"}
        deadline = time.monotonic() + 10
        while (resp := client.get("/readyz")).json() != loading:  # the model loads first
            assert resp.status_code == 503 and time.monotonic() < deadline, resp.json()
            time.sleep(0.01)
        kernel._settled.set()
        assert client.get("/readyz").json() == {"status": "ready"}
    with make_client(ready=False, body_scan=False) as client:  # off: nothing to wait for
        monkeypatch.setattr(body_scan.KERNEL, "_settled", threading.Event())
        monkeypatch.setattr(retrieval_order.KERNEL, "_settled", threading.Event())
        deadline = time.monotonic() + 10
        while client.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline, client.get("/readyz").json()
            time.sleep(0.01)


def test_admin_reload_needs_the_token(client: TestClient, registry_dir: Path) -> None:
    assert client.post("/admin/reload").status_code == 401
    assert client.post("/admin/reload").headers["www-authenticate"] == "Bearer"
    assert client.post("/admin/reload", headers={"Authorization": "Basic abc"}).status_code == 401
    wrong = {"Authorization": "Bearer nope"}
    assert client.post("/admin/reload", headers=wrong).status_code == 403
    right = {"Authorization": f"Bearer {TOKEN}"}
    publish(registry_dir, random_ensemble(NF, seed=9), version="v2")
    body = client.post("/admin/reload", headers=right).json()
    assert body == {"loaded": [{"name": "m", "version": "v2"}], "unchanged": [], "failed": []}
    assert client.post("/rerank", json=ONE).json()["model"]["version"] == "v2"
    # A registry gone is not a success: it answered 200 with nothing loaded, failed or kept.
    registry_dir.rename(registry_dir.with_name("moved"))
    gone = client.post("/admin/reload", headers=right)
    assert gone.status_code == 503, gone.text
    assert gone.json() == {
        "detail": "the registry directory does not exist; the served versions stay"
    }
    assert client.post("/rerank", json=ONE).json()["model"]["version"] == "v2"
    resp = client.post("/admin/reload?model=../x", headers=right)
    assert resp.status_code == 422


def test_admin_is_off_without_a_configured_token(make_client: ClientFactory) -> None:
    with make_client(admin_token=None) as client:
        resp = client.post("/admin/reload", headers={"Authorization": "Bearer anything"})
        assert resp.status_code == 403 and "LTR_ADMIN_TOKEN" in resp.json()["detail"]
        # Without credentials too: not a 401 inviting a token that nothing would accept.
        resp = client.post("/admin/reload")
        assert resp.status_code == 403 and "disabled" in resp.json()["detail"]


def test_a_refused_reload_is_reported_and_counted(client: TestClient, registry_dir: Path) -> None:
    version = publish(registry_dir, random_ensemble(NF, seed=4), version="v2")
    (registry_dir / "m" / version / "model.json").write_bytes(b'{"truncated": ')
    before = _metric(client, 'ltr_model_reload_failures_total{model="m"}')
    body = client.post("/admin/reload", headers={"Authorization": f"Bearer {TOKEN}"}).json()
    assert body["failed"][0]["version"] == "v2" and "sha256" in body["failed"][0]["error"]
    assert client.get("/readyz").status_code == 200
    assert client.post("/rerank", json=ONE).json()["model"]["version"] == "v1"
    assert _metric(client, 'ltr_model_reload_failures_total{model="m"}') == before + 1
    assert "v2" in client.get("/models").json()["errors"]["m"]


def test_failure_and_shed_counters_have_series_before_their_first_event(
    make_client: ClientFactory, registry_dir: Path
) -> None:
    """Before: a series appeared at 1 with its first event, which `increase()` cannot see (no
    earlier sample), so an alert on a model's first refused version never fired."""
    publish(registry_dir, random_ensemble(NF, seed=5), name="first-failure-alerts")
    with make_client() as client:
        text = client.get("/metrics").text.splitlines()
    assert 'ltr_model_reload_failures_total{model="first-failure-alerts"} 0.0' in text
    for reason in (SHED, OVER_BUDGET):
        assert any(
            line.startswith(f'ltr_shed_requests_total{{reason="{reason}"}} ') for line in text
        )
    for reason in ("header_timeout", "body_timeout", "buffer_full"):
        prefix = f'ltr_slow_client_rejections_total{{reason="{reason}"}} '
        assert any(line.startswith(prefix) for line in text), reason


def _metric(client: TestClient, series: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return 0.0


def test_metrics_are_exposed(client: TestClient) -> None:
    client.post("/rerank", json=ONE)
    client.post("/rerank", content=b"{")
    text = client.get("/metrics").text
    assert 'ltr_http_requests_total{method="POST",route="/rerank",status="200"}' in text
    assert 'ltr_http_requests_total{method="POST",route="/rerank",status="422"}' in text
    assert 'ltr_http_request_duration_seconds_bucket{le="0.005",method="POST"' in text
    assert 'ltr_scoring_duration_seconds_count{model="m"}' in text
    assert "ltr_candidates_per_request_count" in text
    assert 'ltr_model_loaded_info{kind="lambdamart",model="m",version="v1"} 1.0' in text
    for name in ("ltr_redis_hits_total", "ltr_redis_misses_total", "ltr_redis_errors_total"):
        assert name in text
    client.get("/definitely-not-a-route-12345")  # unmatched paths share one label
    text = client.get("/metrics").text
    assert "definitely-not" not in text and 'route="unmatched",status="404"' in text
    # The OpenAPI document and the docs page are routes too (not FastAPI's API routes).
    assert client.get("/openapi.json").status_code == 200
    assert client.get("/docs").status_code == 200
    text = client.get("/metrics").text
    assert 'method="GET",route="/openapi.json",status="200"' in text
    assert 'method="GET",route="/docs",status="200"' in text


def test_models_lists_what_serves(client: TestClient) -> None:
    body = client.get("/models").json()
    (info,) = body["models"]
    assert info["name"] == "m" and info["version"] == "v1" and info["default"] is True
    assert info["feature_names"] == [f"f{i}" for i in range(NF)]
    assert info["kind"] == "lambdamart" and body["errors"] == {}


def test_openapi_documents_the_rerank_body_with_examples(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    op = spec["paths"]["/rerank"]["post"]
    assert op["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/RerankRequest"
    )
    schemas = spec["components"]["schemas"]
    assert schemas["RerankRequest"]["examples"][0]["candidates"]
    assert "Candidate" in schemas and "UserInfo" in schemas
    assert {"200", "413", "422", "503"} <= set(op["responses"])
    # What the service middleware answers for any body, before a route sees it.
    feedback = spec["paths"]["/feedback"]["post"]
    assert {"408", "413", "415"} <= set(op["responses"]) & set(feedback["responses"])
    assert schemas["RerankResponse"]["examples"]
    assert "/admin/reload" in spec["paths"] and "/models" in spec["paths"]
    # A schema-driven fuzzer sent a negative value the schema allowed, and got a 422.
    assert schemas["FeedbackEvent"]["properties"]["value"]["minimum"] == 0


def test_the_poll_reloads_without_a_trigger(make_client: ClientFactory, registry_dir) -> None:
    with make_client(reload_poll_seconds=0.05) as client:
        publish(registry_dir, random_ensemble(NF, seed=11), version="v2")
        for _ in range(400):
            if client.post("/rerank", json=ONE).json()["model"]["version"] == "v2":
                break
            time.sleep(0.01)
        assert client.post("/rerank", json=ONE).json()["model"]["version"] == "v2"


def test_admin_reload_of_an_unreadable_registry_is_503_not_500(
    make_client: ClientFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    import app.registry.model_registry as module

    def unreadable(root: Path) -> list[str]:
        raise PermissionError(13, "Permission denied", str(root))

    with make_client() as client:
        monkeypatch.setattr(module, "list_models", unreadable)
        auth = {"Authorization": f"Bearer {TOKEN}"}
        response = client.post("/admin/reload", headers=auth)
        assert response.status_code == 503
        assert response.json()["detail"].startswith("the registry cannot be read")
        assert client.post("/rerank", json=ONE).status_code == 200  # the served model stays


def test_models_shows_the_metrics_data_by_file_name_only(
    make_client: ClientFactory, registry_dir: Path
) -> None:
    """An operations trial read the trainer machine's data paths from /models, which needs no
    token."""
    import json

    from app.artifacts.store import load_version, set_current, write_version

    served = load_version(registry_dir / "m" / "v1")
    where = "/srv/data/2026-11-30.txt+/srv/data/2026-12-01.txt"
    metric = {"value": 0.5, "dataset": where, "dataset_fingerprint": "ab", "empty_query_ndcg": 1}
    manifest = served.manifest.model_copy(update={"version": "v2", "metrics": {"ndcg@10": metric}})
    write_version(registry_dir, manifest, {"model.json": served.files["model.json"]})
    set_current(registry_dir, "m", "v2")
    with make_client() as client:
        (info,) = client.get("/models").json()["models"]
    assert info["version"] == "v2"
    assert info["metrics"]["ndcg@10"] == {**metric, "dataset": "2026-11-30.txt+2026-12-01.txt"}
    on_disk = json.loads((registry_dir / "m" / "v2" / "manifest.json").read_text())
    assert on_disk["metrics"]["ndcg@10"]["dataset"] == where
