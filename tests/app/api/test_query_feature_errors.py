"""422s about query features and counts: one clean error each, named and in good grammar (a
held-out trial found pydantic's union noise in the first and "expected 1 values" in the
second)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.app.api.conftest import app_settings, wait_ready
from tests.support import random_ensemble
from tests.support.sourced_model import item_table, publish_sourced

# One candidate feature (singular counts), two query features, one from the item store.
NAMES = ["bm25", "qlen", "hour", "price"]
SOURCES: dict[str, Any] = {"qlen": "query", "hour": "query", "price": "item"}
NOT_A_NUMBER = "not a number: '1.5' (use null for a missing value)"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    root = tmp_path_factory.mktemp("query-errors") / "registry"
    model = random_ensemble(len(NAMES), num_trees=5, depth=3, seed=4)
    publish_sourced(root, model, SOURCES, item_table(10, ["price"]), feature_names=NAMES)
    with TestClient(create_app(app_settings(registry=root))) as c:
        wait_ready(c)
        yield c


def only_error(client: TestClient, body: dict[str, Any]) -> dict[str, Any]:
    resp = client.post("/rerank", json=body)
    assert resp.status_code == 422, resp.text
    (error,) = resp.json()["detail"]  # one error, not one per branch of a union
    return dict(error)


@pytest.mark.parametrize(
    ("features", "loc", "msg"),
    [
        ({"qlen": "1.5"}, ["qlen"], f"query feature 'qlen': {NOT_A_NUMBER}"),
        ({"qlen": 2, "hour": True}, ["hour"], "query feature 'hour': not a number: true"),
        ({"hour": [1]}, ["hour"], "query feature 'hour': not a number: a list"),
        # The list form is named by the model's query feature order.
        ([1.0, "1.5"], [1], f"query feature 'hour': {NOT_A_NUMBER}"),
        (["1.5", None], [0], f"query feature 'qlen': {NOT_A_NUMBER}"),
        ("1.5", [], "must be an object of query feature name → number, or a list of numbers"),
    ],
)
def test_a_bad_query_value_is_one_error_naming_the_feature(
    client: TestClient, features: Any, loc: list[Any], msg: str
) -> None:
    body = {"query": {"features": features}, "candidates": [{"id": "d1"}]}
    error = only_error(client, body)
    assert error["loc"] == ["body", "query", "features", *loc]
    assert error["msg"].startswith(msg), error["msg"]
    assert "dict[" not in str(error) and "valid list" not in error["msg"]


def test_a_bad_query_value_of_an_unknown_model_is_still_one_error(client: TestClient) -> None:
    """The model names the list's features; a body naming another says the position only."""
    body = {"model": "other", "query": {"features": ["x"]}, "candidates": [{"id": "d1"}]}
    error = only_error(client, body)
    assert error["loc"] == ["body", "query", "features", 0]
    assert error["msg"] == "not a number: 'x' (use null for a missing value)"


def test_null_query_features_are_none_sent(client: TestClient) -> None:
    resp = client.post("/rerank", json={"query": {"features": None}, "candidates": [{"id": "d1"}]})
    assert resp.status_code == 200, resp.text
    assert resp.json()["query_features_missing"] == 2


@pytest.mark.parametrize(
    ("body", "msg"),
    [
        (
            {"candidates": [{"id": "d1", "features": [1.0] * 8}]},
            "expected 1 value in the model's feature order, got 8",
        ),
        (
            {"query": {"features": [1.0]}, "candidates": [{"id": "d1"}]},
            "expected 2 values in the model's query feature order (qlen, hour), got 1",
        ),
        ({"candidates": []}, "at least 1 candidate needed"),
        (
            {"candidates": [{"id": "d1", "features": {"bm25": 1.0, "zz": 2.0}}]},
            "unknown feature name 'zz'",
        ),
        (
            {"candidates": [{"id": "d1", "features": {"zz": 1.0, "yy": 2.0}}]},
            "unknown feature names 'zz', 'yy'",
        ),
    ],
)
def test_counts_in_messages_agree_with_their_nouns(
    client: TestClient, body: dict[str, Any], msg: str
) -> None:
    assert only_error(client, body)["msg"] == msg


def test_at_least_two_candidates_is_plural(tmp_path: Path) -> None:
    root = tmp_path / "registry"
    model = random_ensemble(len(NAMES), num_trees=2, depth=2, seed=1)
    publish_sourced(root, model, SOURCES, item_table(3, ["price"]), feature_names=NAMES)
    with TestClient(create_app(app_settings(registry=root, min_candidates=2))) as c:
        wait_ready(c)
        assert only_error(c, {"candidates": [{"id": "d1"}]})["msg"] == (
            "at least 2 candidates needed"
        )
