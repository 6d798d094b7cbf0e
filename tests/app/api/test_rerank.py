from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.artifacts.tree_dump import Tree, TreeEnsemble
from app.scoring.reference import predict
from tests.app.api.conftest import NF, ClientFactory
from tests.support import publish

RNG = np.random.default_rng(3)


def random_rows(n: int) -> np.ndarray:
    rows = RNG.normal(0, 1, (n, NF)).round(3).astype(np.float32)
    rows[RNG.random((n, NF)) < 0.2] = np.nan
    return rows


def as_lists(rows: np.ndarray) -> list[list[float | None]]:
    return [[None if np.isnan(v) else float(v) for v in row] for row in rows]


def flat_ensemble(value: float) -> TreeEnsemble:
    """Every row scores `value`: one tree without splits."""
    empty = np.zeros(0)
    leaf = Tree(
        empty.astype(np.int32),
        empty,
        empty.astype(np.int32),
        empty.astype(np.int32),
        empty.astype(bool),
        np.array([value]),
    )
    return TreeEnsemble(NF, [leaf])


def expected_order(ensemble: TreeEnsemble, rows: np.ndarray) -> list[int]:
    scores = predict(ensemble, rows)
    return sorted(range(len(rows)), key=lambda i: (-scores[i], i))


@pytest.mark.parametrize("n", [1, 3, 40])  # inline and in a worker thread (> 4 rows)
def test_rerank_orders_as_offline_scoring(client: TestClient, ensemble, n: int) -> None:
    rows = random_rows(n)
    cands = [{"id": f"d{i}", "features": f} for i, f in enumerate(as_lists(rows))]
    resp = client.post("/rerank", json={"candidates": cands})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["model"] == {"name": "m", "version": "v1"}
    assert body["degraded"] is False and body["reasons"] == []
    assert [r["id"] for r in body["results"]] == [f"d{i}" for i in expected_order(ensemble, rows)]
    assert [r["rank"] for r in body["results"]] == list(range(1, n + 1))
    offline = predict(ensemble, rows)
    for r in body["results"]:
        assert r["score"] == pytest.approx(offline[int(r["id"][1:])], rel=1e-6)
    assert len(body["request_id"]) == 32
    assert resp.headers["x-request-id"] == body["request_id"]


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"request_id": "mine-1", "model": "nope", "candidates": [{"id": "a"}]}, 404),
        ({"request_id": "mine-1", "candidates": [{"id": "a", "features": ["x"]}]}, 422),
        ({"request_id": "mine-1", "top_k": 0, "candidates": [{"id": "a"}]}, 422),
    ],
)
def test_an_error_answer_carries_the_bodys_request_id(
    client: TestClient, body: dict[str, Any], status: int
) -> None:
    """It carried a generated id: the client could not match the error to its request."""
    resp = client.post("/rerank", json=body, headers={"x-request-id": "from-header"})
    assert resp.status_code == status, resp.text
    assert resp.headers["x-request-id"] == "mine-1"
    bad = {**body, "request_id": "not valid!"}  # never echoed: the header's stands
    assert (
        client.post("/rerank", json=bad, headers={"x-request-id": "h-1"}).headers["x-request-id"]
        == "h-1"
    )


@pytest.mark.parametrize("path", ["/rerank/", "/models/", "/livez/"])
def test_a_trailing_slash_is_not_found_not_redirected(client: TestClient, path: str) -> None:
    """It was a 307 to a Location built from the request's Host header."""
    method = client.post if path == "/rerank/" else client.get
    resp = method(path, headers={"host": "elsewhere.example"}, follow_redirects=False)
    assert resp.status_code == 404 and "location" not in resp.headers


def test_maps_and_lists_score_the_same(client: TestClient) -> None:
    rows = random_rows(6)
    lists = as_lists(rows)
    maps = [{f"f{j}": v for j, v in enumerate(row) if v is not None} for row in lists]
    as_list = client.post(
        "/rerank", json={"candidates": [{"id": i, "features": f} for i, f in enumerate(lists)]}
    ).json()["results"]
    mixed = [{"id": i, "features": maps[i] if i % 2 else lists[i]} for i in range(6)]
    as_mixed = client.post("/rerank", json={"candidates": mixed}).json()["results"]
    assert as_list == as_mixed


def test_top_k_request_id_and_explain(client: TestClient, ensemble) -> None:
    rows = random_rows(10)
    rows[3] = np.nan
    cands = [{"id": f"d{i}", "features": f} for i, f in enumerate(as_lists(rows))]
    resp = client.post(
        "/rerank",
        json={"candidates": cands, "top_k": 3, "request_id": "abc-1", "explain": True},
        headers={"x-request-id": "from-header"},
    )
    body = resp.json()
    assert body["request_id"] == "abc-1" and resp.headers["x-request-id"] == "abc-1"
    assert [r["rank"] for r in body["results"]] == [1, 2, 3]
    assert [r["id"] for r in body["results"]] == [
        f"d{i}" for i in expected_order(ensemble, rows)[:3]
    ]
    for r in body["results"]:
        assert r["missing_features"] == int(np.isnan(rows[int(r["id"][1:])]).sum())
    assert body["user_cluster"] is None
    # Without a body request_id the header's is used.
    resp = client.post("/rerank", json={"candidates": cands[:2]}, headers={"x-request-id": "h-7"})
    assert resp.json()["request_id"] == "h-7"
    assert "missing_features" not in resp.json()["results"][0]
    # null is "not given" for explain as for the other optional fields.
    resp = client.post("/rerank", json={"candidates": cands[:2], "explain": None, "top_k": None})
    assert resp.status_code == 200 and "missing_features" not in resp.json()["results"][0]


def test_ties_keep_input_order(make_client: ClientFactory, registry_dir: Path) -> None:
    publish(registry_dir, flat_ensemble(1.0), name="flat", version="v1")
    with make_client() as client:
        cands = [{"id": f"d{i}", "features": [0.0] * NF} for i in range(7)]
        body = client.post("/rerank", json={"model": "flat", "candidates": cands}).json()
    assert [r["id"] for r in body["results"]] == [f"d{i}" for i in range(7)]
    assert {r["score"] for r in body["results"]} == {1.0}


def test_model_choice(make_client: ClientFactory, registry_dir: Path) -> None:
    publish(registry_dir, flat_ensemble(2.0), name="flat", version="v3")
    one = {"candidates": [{"id": "a", "features": [1.0] * NF}]}
    with make_client() as client:
        resp = client.post("/rerank", json=one)
        assert resp.status_code == 422 and "model" in resp.text  # two models, no default
        assert client.post("/rerank", json={**one, "model": "flat"}).json()["model"] == {
            "name": "flat",
            "version": "v3",
        }
        resp = client.post("/rerank", json={**one, "model": "nope"})
        assert resp.status_code == 404 and "nope" in resp.json()["detail"]
    with make_client(default_model="flat") as client:
        assert client.post("/rerank", json=one).json()["model"]["name"] == "flat"


def test_no_model_gives_503(make_client: ClientFactory, tmp_path: Path) -> None:
    with make_client(ready=False, registry=tmp_path / "empty") as client:
        resp = client.post("/rerank", json={"candidates": [{"id": "a", "features": [1.0] * NF}]})
        assert resp.status_code == 503
        assert "no model" in resp.json()["detail"]
        assert client.get("/readyz").status_code == 503
        assert client.get("/livez").status_code == 200


BODIES_FOR_BOTH_PATHS: list[bytes] = [
    b'{"candidates":[{"id":"a","features":[1,2,3,4,5]},{"id":"b","features":[5,4,3,2,1]}]}',
    b'{"top_k":1,"candidates":[{"features":[0.5,null,1e39,-0.0,3],"id":7},'
    b' {"id":8,"features":[1,1,1,1,1]}]}',
    b'{"candidates":[{"id":"a","features":[1,2,3,4]}]}',  # wrong width
    b'{"candidates":[{"id":"a","features":[1,2,3,4,5]},{"id":"a","features":[1,2,3,4,5]}]}',
    b'{"candidates":[{"id":"a","features":null}]}',
    b'{"candidates":[{"id":"a"}]}',
    b'{"candidates":[]}',
    b'{"candidates":[{"id":"a","features":[1,2,3,4,"5"]}]}',
    b'{"candidates":[{"id":"a","features":[1,2,3,4,5]}],"model":"nope"}',
    b'{"candidates":[{"id":"a","features":[1,2,3,4,5]}],"top_k":0}',
    b'{"candidates":[{"id":"a","features":[1,2,3,4,5]}],"top_k":"x",}',
    b'{"candidates":[{"id":"a","features":{"f0":1,"f3":2.5}},{"id":"b","features":[1,2,3,4,5]},'
    b' {"id":"c","features":{"f4":-1,"f0":null,"f4":7}}]}',
    b'{"candidates":[{"id":"a","features":{"f0":1,"zz":2}}]}',  # an unknown name
    b'{"candidates":[{"id":"a","features":{}}]}',
]


@pytest.mark.parametrize("raw", BODIES_FOR_BOTH_PATHS)
def test_the_body_scan_answers_as_the_full_decode(
    make_client: ClientFactory, raw: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compiled body scan (on by default) and orjson's full decode give the same answer,
    scores and errors alike."""
    from app.api import admission, body_scan

    body_scan.KERNEL.compile_now()
    scanned: list[bool] = []

    def spy(body: bytes, max_candidates: int) -> Any:
        got = body_scan.scan_body(body, max_candidates)
        scanned.append(got is not None)
        return got

    monkeypatch.setattr(admission, "scan_body", spy)
    answers = []
    for scan in (True, False):
        with make_client(body_scan=scan) as client:
            resp = client.post(
                "/rerank",
                content=raw,
                headers={"content-type": "application/json", "x-request-id": "r"},
            )
            answers.append((resp.status_code, resp.json()))
    assert answers[0] == answers[1]
    # Only the first app scans; it gives up on a string value and on bad JSON.
    assert scanned == [b'"5"' not in raw and b",}" not in raw]


def test_generated_request_ids_are_32_hex_digits_and_differ(client: TestClient) -> None:
    ids = {client.get("/livez").headers["x-request-id"] for _ in range(20)}
    assert len(ids) == 20
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
