from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.api.errors import install_error_handlers
from app.api.feedback_routes import feedback_router
from app.impressions.feedback import ImpressionLog
from tests.app.impressions.conftest import answer, features, jsonl_settings, settings


def make_app(log: ImpressionLog | None) -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)
    app.include_router(feedback_router)
    if log is not None:
        app.state.impressions = log
    return app


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    log = ImpressionLog(jsonl_settings(tmp_path))
    log.log_rerank(
        answer("r1", ["a", "b", 3], [2, 0, 1]), None, None, None, ["a", "b", 3], features(3)
    )
    with TestClient(make_app(log)) as c:
        yield c
    asyncio.run(log.close())


def post(client: TestClient, body: Any) -> Any:
    return client.post("/feedback", json=body)


def test_accepts_and_deduplicates(client: TestClient) -> None:
    body = {
        "request_id": "r1",
        "events": [{"id": 3, "type": "click"}, {"id": "a", "type": "dwell", "value": 42.5}],
    }
    first = post(client, body)
    assert first.status_code == 202
    assert first.json() == {"request_id": "r1", "accepted": 2, "duplicates": 0}
    assert post(client, body).json() == {"request_id": "r1", "accepted": 0, "duplicates": 2}


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"request_id": "zz", "events": [{"id": "a", "type": "click"}]}, 404),
        ({"request_id": "r1", "events": [{"id": "x", "type": "click"}]}, 422),
        ({"request_id": "r1", "events": [{"id": "3", "type": "click"}]}, 422),  # 3 != "3"
        ({"request_id": "r1", "events": [{"id": "a", "type": "like"}]}, 422),
        ({"request_id": "r1", "events": []}, 422),
        ({"request_id": "r1"}, 422),
        ({"request_id": "r1", "events": [{"id": "a", "type": "click", "extra": 1}]}, 422),
        ({"request_id": "", "events": [{"id": "a", "type": "click"}]}, 422),
        ([1, 2], 422),
    ],
)
def test_rejects(client: TestClient, body: Any, status: int) -> None:
    response = post(client, body)
    assert response.status_code == status, response.text
    assert "detail" in response.json()


def test_not_finite_value_is_422(client: TestClient) -> None:
    raw = b'{"request_id": "r1", "events": [{"id": "a", "type": "dwell", "value": NaN}]}'
    response = client.post("/feedback", content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 422


def test_without_logging_is_503(tmp_path: Path) -> None:
    for log in (None, ImpressionLog(settings(impressions_enabled=False))):
        with TestClient(make_app(log)) as c:
            response = post(c, {"request_id": "r1", "events": [{"id": "a", "type": "click"}]})
            assert response.status_code == 503
