"""A 422 names every error of `query.features` and then every candidate error: a bad query
value hid the other query errors and all the candidates' (a held-out trial), on the
compiled body-scan path and the full decode alike."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.api.errors import MAX_ERRORS
from app.main import create_app
from tests.app.api.conftest import app_settings, wait_ready
from tests.support import random_ensemble
from tests.support.sourced_model import item_table, publish_sourced

NAMES = ["c1", "c2", "qlen", "hour", "i_pop", "i_price"]
SOURCES: dict[str, Any] = {"qlen": "query", "hour": "query", "i_pop": "item", "i_price": "item"}
NOT_A_NUMBER = "not a number: 'x' (use null for a missing value)"


@pytest.fixture(scope="module", params=[True, False], ids=["body-scan", "full-decode"])
def client(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[TestClient]:
    root = tmp_path_factory.mktemp("query-and-candidates") / "registry"
    model = random_ensemble(len(NAMES), num_trees=5, depth=3, seed=4)
    table = item_table(10, ["i_pop", "i_price"])
    publish_sourced(root, model, SOURCES, table, name="itm", feature_names=NAMES)
    settings = app_settings(registry=root, body_scan=request.param)
    with TestClient(create_app(settings)) as c:
        wait_ready(c)
        yield c


def detail(client: TestClient, body: dict[str, Any]) -> list[tuple[list[Any], str, str]]:
    resp = client.post("/rerank", json={"model": "itm", **body})
    assert resp.status_code == 422, resp.text
    return [(d["loc"], d["type"], d["msg"]) for d in resp.json()["detail"]]


def test_query_errors_come_first_then_the_candidates(client: TestClient) -> None:
    """The trial's body: one error was named (qlen), five are wrong."""
    body = {
        "query": {"features": {"c2": 1, "yy": 2, "qlen": "x"}},
        "candidates": [{"id": "d1", "features": {"i_pop": 1}}, {"id": "d3", "features": {"zz": 1}}],
    }
    q, c = ["body", "query", "features"], ["body", "candidates"]
    assert detail(client, body) == [
        (
            [*q, "c2"],
            "unknown_feature",
            "'c2' is a candidate feature: send it in each candidate's `features`",
        ),
        ([*q, "yy"], "unknown_feature", "unknown query feature 'yy'"),
        ([*q, "qlen"], "float_type", f"query feature 'qlen': {NOT_A_NUMBER}"),
        (
            [*c, 0, "features", "i_pop"],
            "unknown_feature",
            "'i_pop' is an item feature: the "
            "service looks it up by candidate id, not sent per candidate",
        ),
        ([*c, 1, "features", "zz"], "unknown_feature", "unknown feature name 'zz'"),
    ]


def test_a_query_list_names_its_count_and_values_beside_the_candidates(client: TestClient) -> None:
    body = {
        "query": {"features": [1.0, "x", True]},
        "candidates": [{"id": "d1", "features": [0.1, "y"]}, {"id": "d2", "features": [0.1]}],
    }
    assert [(loc[2:], kind) for loc, kind, _ in detail(client, body)] == [
        (["features"], "feature_count"),
        (["features", 1], "float_type"),
        (["features", 2], "float_type"),
        ([0, "features", 1], "float_type"),
        ([1, "features"], "feature_count"),
    ]


def test_every_bad_query_value_is_named_when_the_candidates_are_good(client: TestClient) -> None:
    body = {
        "query": {"features": {"qlen": "x", "hour": "x"}},
        "candidates": [{"id": "d1", "features": [0.1, 0.7]}, {"id": "d2", "features": [0.2, 0.1]}],
    }
    assert [msg for _, _, msg in detail(client, body)] == [
        f"query feature 'qlen': {NOT_A_NUMBER}",
        f"query feature 'hour': {NOT_A_NUMBER}",
    ]


def test_many_query_errors_are_counted_within_the_cap(client: TestClient) -> None:
    body = {
        "query": {"features": {f"q{i}": 1.0 for i in range(30)}},
        "candidates": [{"id": "d1", "features": ["x", 0.1]}, {"id": 2.5}],
    }
    got = detail(client, body)
    assert len(got) == MAX_ERRORS + 1
    assert [loc[-1] for loc, _, _ in got[: MAX_ERRORS - 1]] == [f"q{i}" for i in range(19)]
    assert got[MAX_ERRORS - 1] == (
        ["body", "query", "features"],
        "too_many_errors",
        "... and 11 more errors in query.features",
    )
    assert got[-1] == (["body"], "too_many_errors", "... and 2 more errors")


def test_a_valid_query_with_bad_candidates_is_as_before(client: TestClient) -> None:
    body = {"query": {"features": {"qlen": 2}}, "candidates": [{"id": "d1", "features": ["x"]}]}
    assert [loc for loc, _, _ in detail(client, body)] == [["body", "candidates", 0, "features"]]


def test_bad_query_values_and_another_envelope_error_are_all_named(client: TestClient) -> None:
    """pydantic's path (the envelope is bad beyond its query): every value, not the first."""
    body = {"query": {"features": [1.0, "x", "x"]}, "top_k": "3", "candidates": [{"id": "d1"}]}
    assert [loc[2:] for loc, _, _ in detail(client, body)] == [
        [],
        ["features"],
        ["features", 1],
        ["features", 2],
    ]


def test_envelope_errors_come_with_the_candidates_errors(client: TestClient) -> None:
    """A bad `top_k` or an unknown key hid every candidate error (a held-out trial)."""
    body = {
        "top_k": 0,
        "bogus": 1,
        "query": {"features": {"qlen": 1}, "extra": 2},
        "candidates": [{"id": "d1", "features": ["x", 0.1]}, {"features": [0.1, 0.2]}],
    }
    assert [(loc, kind) for loc, kind, _ in detail(client, body)] == [
        (["body", "query", "extra"], "extra_forbidden"),  # the envelope's, in field order
        (["body", "top_k"], "greater_than_equal"),
        (["body", "bogus"], "extra_forbidden"),
        (["body", "candidates", 0, "features", 0], "float_type"),
        (["body", "candidates", 1, "id"], "missing"),
    ]
    # alone, the envelope's errors are the whole 422
    good = [{"id": "d1", "features": [0.1, 0.2]}]
    assert detail(client, {"top_k": "x", "candidates": good}) == [
        (["body", "top_k"], "int_type", "Input should be a valid integer")
    ]


def test_a_bad_model_name_is_the_envelope_errors_alone(client: TestClient) -> None:
    """No model, no candidate check: the envelope's errors as pydantic gives them."""
    resp = client.post(
        "/rerank",
        json={"model": "a/b", "top_k": 0, "candidates": [{"id": "d1", "features": ["x"]}]},
    )
    assert resp.status_code == 422
    assert [d["loc"] for d in resp.json()["detail"]] == [["body", "model"], ["body", "top_k"]]


def test_query_errors_and_candidates_past_the_search_cut_off(client: TestClient) -> None:
    """The candidates' search stops past what a 422 shows: the count says so still."""
    bad = [{"id": f"d{i}", "features": ["x", 0.1]} for i in range(30)]
    body = {"query": {"features": {"qlen": "x", "yy": 1}}, "candidates": bad}
    got = detail(client, body)
    assert [loc[1] for loc, _, _ in got[:3]] == ["query", "query", "candidates"]
    assert got[-1][2] == "... and at least 3 more errors (candidates from [21] on not checked)"
