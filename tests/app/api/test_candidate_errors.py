"""A 422 names every bad candidate (the first MAX_ERRORS, then how many more), not only the
first: a held-out trial needed one round trip per bad candidate."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.api import candidate_errors
from app.api.candidate_errors import every_candidate_error
from app.api.request_matrix import MAX_ERRORS, RequestError, RequestErrors, build_matrix
from tests.app.api.conftest import NF

GOOD = [0.5] * NF


def detail(client: TestClient, candidates: list[Any]) -> list[dict[str, Any]]:
    resp = client.post("/rerank", json={"candidates": candidates})
    assert resp.status_code == 422, resp.text[:300]
    return resp.json()["detail"]


def searched(
    candidates: list[Any], names: list[str], monkeypatch: pytest.MonkeyPatch
) -> tuple[RequestError, RequestError, list[int]]:
    """(build_matrix's first error, every_candidate_error's answer, the sizes of the parts it
    built)."""
    with pytest.raises(RequestError) as first:
        build_matrix(candidates, names, max_candidates=len(candidates))
    built: list[int] = []

    def counting(part: list[Any], *args: Any, **kwargs: Any) -> Any:
        built.append(len(part))
        return build_matrix(part, *args, **kwargs)

    monkeypatch.setattr(candidate_errors, "build_matrix", counting)
    return first.value, every_candidate_error(candidates, names, first.value, {}), built


def test_many_bad_values_are_each_named_then_counted(shared_client: TestClient) -> None:
    bad = [{"id": f"d{i}", "features": ["x"] * NF} for i in range(50)]
    got = detail(shared_client, bad)
    assert len(got) == MAX_ERRORS + 1
    assert [d["loc"][:3] for d in got[:MAX_ERRORS]] == [
        ["body", "candidates", i] for i in range(MAX_ERRORS)
    ]
    assert all(d["type"] == "float_type" for d in got[:MAX_ERRORS])
    # The search stops past what a 422 shows (each bad candidate costs ~log2(n) builds).
    assert got[-1] == {
        "loc": ["body"],
        "msg": f"... and at least 1 more error (candidates from [{MAX_ERRORS + 1}] on not checked)",
        "type": "too_many_errors",
    }


def test_every_kind_of_candidate_error_in_body_order(shared_client: TestClient) -> None:
    candidates: list[Any] = [{"id": f"d{i}", "features": GOOD} for i in range(12)]
    candidates[1] = {"features": GOOD}  # no id
    candidates[3] = {"id": "d3", "features": GOOD[:-1]}  # one value short
    candidates[5] = {"id": "d5", "features": {"nope": 1.0}}  # an unknown name
    candidates[6] = {"id": "d0", "features": GOOD}  # d0 again
    candidates[8] = 7  # not an object
    candidates[10] = {"id": 1.5, "features": GOOD}  # an id that is a float
    candidates[11] = {"id": "d0", "features": GOOD}  # d0 a third time
    got = detail(shared_client, candidates)
    assert [(d["loc"][2], d["type"]) for d in got] == [
        (1, "missing"),
        (3, "feature_count"),
        (5, "unknown_feature"),
        (6, "duplicate_id"),
        (8, "value_error"),
        (10, "id_type"),
        (11, "duplicate_id"),
    ]
    assert got[3]["msg"] == "duplicate id 'd0' (also candidates[0])"


def test_a_duplicate_id_does_not_hide_the_other_errors(shared_client: TestClient) -> None:
    """The fast path checks ids before values: a duplicate was the only error named."""
    candidates: list[Any] = [{"id": f"d{i}", "features": GOOD} for i in range(4)]
    candidates[2] = {"id": "d0", "features": ["x", *GOOD[1:]]}
    candidates[3] = {"id": "d0", "features": GOOD}
    got = detail(shared_client, candidates)
    assert [(d["loc"][2], d["type"]) for d in got] == [(2, "float_type"), (3, "duplicate_id")]


def test_one_bad_candidate_is_one_error_as_before(shared_client: TestClient) -> None:
    candidates: list[Any] = [{"id": f"d{i}", "features": GOOD} for i in range(30)]
    candidates[17] = {"id": "d17", "features": [True, *GOOD[1:]]}
    assert detail(shared_client, candidates) == [
        {
            "loc": ["body", "candidates", 17, "features", 0],
            "msg": "not a number: true (use null for a missing value)",
            "type": "float_type",
        }
    ]


def test_candidates_that_are_not_objects_are_each_named(shared_client: TestClient) -> None:
    got = detail(shared_client, list(range(25)))
    assert [d["loc"] for d in got[:3]] == [["body", "candidates", i] for i in range(3)]
    assert got[-1]["msg"] == "... and at least 1 more error (candidates from [21] on not checked)"


@pytest.mark.parametrize("where", [0, 5_000, 9_999])
def test_the_error_path_builds_about_what_a_valid_body_does(
    where: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Parts that build are skipped whole: one bad candidate among 10,000 is found by building
    about twice the body's candidates, in a few dozen parts, not 10,000 one-candidate ones."""
    names = [f"f{i}" for i in range(NF)]
    candidates: list[Any] = [{"id": i, "features": GOOD} for i in range(10_000)]
    candidates[where] = {"id": where, "features": ["x"] * NF}
    first, error, built = searched(candidates, names, monkeypatch)
    assert error is first and error.loc[2] == where
    assert sum(built) <= 2 * len(candidates) + 64 and len(built) <= 2 * 14 + 1, built


def test_ten_thousand_bad_candidates_stop_the_search_past_what_is_shown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: every one of 10,000 bad candidates was isolated, 20,000 builds: 0.3-5 s of a
    worker's event loop (a held-out trial), where the valid body took 30-400 ms."""
    names = [f"f{i}" for i in range(NF)]
    candidates: list[Any] = [{"id": i, "features": ["x"] * NF} for i in range(10_000)]
    candidates[3] = candidates[5] = {"id": "twice", "features": GOOD}  # within those checked
    _, error, built = searched(candidates, names, monkeypatch)
    assert isinstance(error, RequestErrors) and len(built) <= (MAX_ERRORS + 1) * 2 * 14
    shown = error.detail()
    assert [d["loc"][2] for d in shown[:MAX_ERRORS]] == [0, 1, 2, *range(4, MAX_ERRORS + 1)]
    assert shown[4]["type"] == "duplicate_id"  # candidates[5], a repeat of candidates[3]
    assert (
        shown[-1]["msg"] == "... and at least 2 more errors (candidates from [23] on not checked)"
    )
