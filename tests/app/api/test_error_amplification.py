"""A small body cannot make a huge 422: an object with far more keys than its model has fields
is one error, and a 422 lists at most MAX_ERRORS errors and how many more there were."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient

from app.api.errors import MAX_ERRORS
from app.api.key_counts import MAX_PROFILE_FIELDS, MAX_QUERY_FEATURES
from app.api.request_matrix import RequestError
from app.api.retrieval_order import fallback_ids
from app.settings import Settings
from tests.app.api.conftest import NF

N = 5_000  # unknown keys: about 40 KB, under the tests' 64 KiB body limit
CAND = {"id": "a", "features": [0.5] * NF}


def keys(n: int, value: Any = 0) -> dict[str, Any]:
    return {f"{i:x}": value for i in range(n)}


def small_422(client: TestClient, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    started = time.perf_counter()
    resp = client.post(path, content=orjson.dumps(body))
    elapsed = time.perf_counter() - started
    assert resp.status_code == 422, resp.text[:500]
    assert len(resp.content) < 10_000, len(resp.content)
    assert elapsed < 5.0
    detail = resp.json()["detail"]
    assert isinstance(detail, list) and 1 <= len(detail) <= MAX_ERRORS + 1
    return detail


def test_unknown_top_level_keys_are_one_error(client: TestClient) -> None:
    detail = small_422(client, "/rerank", {"candidates": [CAND], **keys(N)})
    assert detail == [
        {
            "loc": ["body"],
            "msg": f"{N:,} unknown keys; accepted: candidates, request_id, query_id, model, "
            "user, query, top_k, explain",
            "type": "too_many_keys",
        }
    ]
    # A few unknown keys are still named one by one.
    detail = small_422(client, "/rerank", {"candidates": [CAND], "topk": 1, "modle": "m"})
    assert sorted(d["loc"][-1] for d in detail) == ["modle", "topk"]


def test_the_top_level_limit_counts_the_candidates_key(client: TestClient) -> None:
    """8 fields + 8 of slack: 17 keys are too many. The candidates, read apart, were not
    counted, and 17 keys gave 16 errors."""
    detail = small_422(client, "/rerank", {"candidates": [CAND], **keys(16)})
    assert detail[0]["type"] == "too_many_keys" and "16 unknown keys" in detail[0]["msg"]
    detail = small_422(client, "/rerank", {"candidates": [CAND], **keys(15)})
    assert [d["type"] for d in detail] == ["extra_forbidden"] * 15


@pytest.mark.parametrize("field", ["user", "query", "explain"])
def test_unknown_keys_of_nested_objects_are_one_error(client: TestClient, field: str) -> None:
    detail = small_422(client, "/rerank", {"candidates": [CAND], field: keys(N)})
    assert len(detail) == 1 and detail[0]["loc"] == ["body", field]
    assert detail[0]["type"] == "too_many_keys" and f"{N:,} unknown keys" in detail[0]["msg"]


def test_many_bad_profile_values_are_one_error(client: TestClient) -> None:
    body = {"candidates": [CAND], "user": {"profile": keys(MAX_PROFILE_FIELDS, [])}}
    detail = small_422(client, "/rerank", body)
    assert len(detail) == 1 and detail[0]["type"] == "too_many_errors"
    assert f"{MAX_PROFILE_FIELDS:,} profile values" in detail[0]["msg"]


@pytest.mark.parametrize(
    ("outer", "inner", "limit", "what"),
    [
        # A trial: 100,000 well-typed profile fields held a worker until the budget answered
        # over_budget, where other objects of many keys are refused at once.
        ("user", "profile", MAX_PROFILE_FIELDS, "profile fields"),
        # Another: 2,000,000 unknown query features (32 MB) held a worker's loop 2.5-4 s.
        ("query", "features", MAX_QUERY_FEATURES, "query features"),
    ],
)
def test_a_map_of_more_entries_than_any_model_takes_is_one_error(
    client: TestClient, outer: str, inner: str, limit: int, what: str
) -> None:
    body = {"candidates": [CAND], outer: {inner: keys(limit + 1, "x")}}
    detail = small_422(client, "/rerank", body)
    assert detail == [
        {
            "loc": ["body", outer, inner],
            "msg": f"{limit + 1:,} {what}; at most {limit:,}",
            "type": "too_many_keys",
        }
    ]


def test_unknown_feature_names_stay_small(client: TestClient) -> None:
    # A guard (one error per group of unknown names already, before the key limits).
    small_422(client, "/rerank", {"candidates": [{"id": "a", "features": keys(N)}]})


def test_feedback_unknown_keys_are_one_error(client: TestClient) -> None:
    detail = small_422(client, "/feedback", {"request_id": "r", "events": [], **keys(N)})
    assert detail[0]["loc"] == ["body"] and detail[0]["type"] == "too_many_keys"
    assert detail[0]["msg"] == f"{N:,} unknown keys; accepted: request_id, events"


def test_feedback_event_unknown_keys_are_one_error(client: TestClient) -> None:
    body = {"request_id": "r", "events": [{"id": "a", "type": "click"}, keys(N)]}
    detail = small_422(client, "/feedback", body)
    assert detail == [
        {
            "loc": ["body", "events", 1],
            "msg": f"{N:,} unknown keys; accepted: id, type, value",
            "type": "too_many_keys",
        }
    ]


def test_many_errors_are_cut_with_a_count(client: TestClient) -> None:
    # 500 events of 8 unknown keys each (within the slack): 4,000 errors from pydantic.
    events = [{"id": "a", "type": "click", **keys(8)} for _ in range(500)]
    detail = small_422(client, "/feedback", {"request_id": "r", "events": events})
    assert len(detail) == MAX_ERRORS + 1
    assert detail[-1] == {
        "loc": ["body"],
        "msg": f"... and {4000 - MAX_ERRORS:,} more errors",
        "type": "too_many_errors",
    }


@pytest.mark.usefixtures("shed_path")
def test_the_shed_path_refuses_many_keys_at_once() -> None:
    raw = orjson.dumps({"candidates": [{"id": "a"}], **keys(N)})
    started = time.perf_counter()
    with pytest.raises(RequestError) as caught:
        fallback_ids(raw, Settings())
    assert time.perf_counter() - started < 5.0
    assert caught.value.type == "too_many_keys" and caught.value.loc == ("body",)
