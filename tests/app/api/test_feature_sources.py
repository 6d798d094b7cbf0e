"""/rerank with feature sources: candidates by id, query features once, item features from the
in-process snapshot; scored and logged as assembled."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
import redis
from fastapi.testclient import TestClient

from app.api import admission, assembly
from app.artifacts.tree_dump import TreeEnsemble
from app.features.item_snapshot import ItemSnapshot
from app.main import create_app
from app.scoring.reference import predict
from tests.app.api.conftest import app_settings, wait_ready
from tests.support import random_ensemble
from tests.support.redis_server import RedisServer
from tests.support.sourced_model import item_table, publish_sourced
from trainer.clicks.join import join_logs
from trainer.clicks.logs import read_logs
from trainer.features.redis_sets import push_item_set

# Sources interleaved on purpose: the service must put each value in its model column.
NAMES = ["bm25", "price", "qlen", "ctr", "title", "pop", "hour", "rating"]
SOURCES: dict[str, Any] = {
    "price": "item",
    "ctr": "item",
    "pop": "item",
    "rating": "item",
    "qlen": "query",
    "hour": "query",
}
SET_NAMES = ["rating", "extra", "price", "ctr", "pop"]  # the set's own order, one unused
N_ITEMS = 50


@pytest.fixture(scope="module")
def model() -> TreeEnsemble:
    return random_ensemble(len(NAMES), num_trees=20, depth=4, seed=11)


@pytest.fixture(scope="module")
def table():  # type: ignore[no-untyped-def]
    return item_table(N_ITEMS, SET_NAMES, seed=5)


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory, model: TreeEnsemble, table) -> Path:
    root = tmp_path_factory.mktemp("sourced") / "registry"
    publish_sourced(root, model, SOURCES, table, feature_names=NAMES)
    return root


@pytest.fixture(scope="module")
def client(registry: Path) -> Iterator[TestClient]:
    with TestClient(create_app(app_settings(registry=registry))) as c:
        wait_ready(c)
        yield c


def expected_rows(
    table, ids: list[str], cand: dict[str, list[float | None]], query: dict[str, float]
) -> np.ndarray:  # type: ignore[no-untyped-def]
    """The rows the model must see, built by hand."""
    rows = np.full((len(ids), len(NAMES)), np.nan, dtype=np.float32)
    where = {str(i): k for k, i in enumerate(table.ids.tolist())}
    for r, cid in enumerate(ids):
        for j, name in enumerate(NAMES):
            if name in SET_NAMES and cid in where:
                rows[r, j] = table.matrix[where[cid], SET_NAMES.index(name)]
            elif name in query:
                rows[r, j] = query[name]
            elif name in cand and cand[name][r] is not None:
                rows[r, j] = cand[name][r]
    return rows


def scores_of(body: dict[str, Any]) -> dict[str, float]:
    return {r["id"]: r["score"] for r in body["results"]}


def test_id_only_candidates_score_from_the_snapshot(client: TestClient, model, table) -> None:
    ids = ["d3", "d17", "d0", "d42"]
    query = {"qlen": 3.0, "hour": 14.0}
    body = {"query": {"features": query}, "candidates": [{"id": i} for i in ids]}
    resp = client.post("/rerank", json=body)
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert out["degraded"] is False and out["reasons"] == []
    assert out["item_features_missing"] == 0
    rows = expected_rows(table, ids, {}, query)
    expected = dict(zip(ids, predict(model, rows).tolist(), strict=True))
    assert scores_of(out) == pytest.approx(expected, rel=1e-9)


def test_candidate_features_by_name_and_position(client: TestClient, model, table) -> None:
    ids = ["d1", "d2", "d3"]
    cand = {"bm25": [12.5, None, -1.0], "title": [0.5, 1.0, None]}
    query = {"qlen": 2.0, "hour": 9.0}
    as_maps = [
        {"id": i, "features": {k: v[r] for k, v in cand.items() if v[r] is not None}}
        for r, i in enumerate(ids)
    ]
    as_lists = [
        {"id": i, "features": [cand["bm25"][r], cand["title"][r]]} for r, i in enumerate(ids)
    ]
    rows = expected_rows(table, ids, cand, query)
    expected = dict(zip(ids, predict(model, rows).tolist(), strict=True))
    for cands, q in ((as_maps, query), (as_lists, [query["qlen"], query["hour"]])):
        resp = client.post("/rerank", json={"query": {"features": q}, "candidates": cands})
        assert resp.status_code == 200, resp.text
        assert scores_of(resp.json()) == pytest.approx(expected, rel=1e-9)


def test_unknown_items_are_missing_and_counted(client: TestClient, model, table) -> None:
    ids = ["d1", "nope", "d2", "gone"]
    resp = client.post("/rerank", json={"candidates": [{"id": i} for i in ids]})
    out = resp.json()
    assert resp.status_code == 200 and out["item_features_missing"] == 2
    # No `query` either: both query features are missing too, said as such (not degraded).
    assert out["reasons"] == ["item_features_missing", "query_features_missing"]
    assert out["query_features_missing"] == 2 and out["degraded"] is False
    rows = expected_rows(table, ids, {}, {})
    assert scores_of(out) == pytest.approx(
        dict(zip(ids, predict(model, rows).tolist(), strict=True))
    )


def test_integer_ids_find_their_items(client: TestClient, tmp_path: Path, model) -> None:
    numeric = item_table(10, SET_NAMES, seed=2, prefix="")
    root = tmp_path / "registry"
    publish_sourced(root, model, SOURCES, numeric, feature_names=NAMES)
    with TestClient(create_app(app_settings(registry=root))) as c:
        wait_ready(c)
        out = c.post("/rerank", json={"candidates": [{"id": 7}, {"id": "3"}]}).json()
    assert out["item_features_missing"] == 0
    rows = expected_rows(numeric, ["7", "3"], {}, {})
    assert [
        r["score"] for r in sorted(out["results"], key=lambda r: str(r["id"]) != "7")
    ] == pytest.approx(predict(model, rows).tolist())


@pytest.mark.parametrize(
    ("body", "loc", "msg"),
    [
        (
            {"candidates": [{"id": "d1", "features": {"price": 3.0}}]},
            ["body", "candidates", 0, "features", "price"],
            "'price' is an item feature: the service looks it up by candidate id",
        ),
        (
            {"candidates": [{"id": "d1", "features": {"qlen": 3.0}}]},
            ["body", "candidates", 0, "features", "qlen"],
            "'qlen' is a query feature: send it once in `query.features`",
        ),
        (
            {"query": {"features": {"bm25": 1.0}}, "candidates": [{"id": "d1"}]},
            ["body", "query", "features", "bm25"],
            "'bm25' is a candidate feature: send it in each candidate's `features`",
        ),
        (
            {"query": {"features": {"price": 1.0}}, "candidates": [{"id": "d1"}]},
            ["body", "query", "features", "price"],
            "'price' is an item feature",
        ),
        (
            {"query": {"features": [1.0]}, "candidates": [{"id": "d1"}]},
            ["body", "query", "features"],
            "expected 2 values in the model's query feature order (qlen, hour), got 1",
        ),
        (
            {"candidates": [{"id": "d1"}, {"features": [1.0, 2.0]}]},
            ["body", "candidates", 1, "id"],
            "field required",
        ),
        (
            {"candidates": [{"id": "d1", "features": [1.0, 2.0, 3.0]}]},
            ["body", "candidates", 0, "features"],
            "expected 2 values",
        ),
        (
            {"candidates": [{"id": "d1"}, {"id": "d1"}]},
            ["body", "candidates", 1, "id"],
            "duplicate id 'd1'",
        ),
    ],
)
def test_what_a_source_cannot_supply_is_a_clear_422(
    client: TestClient, body: dict[str, Any], loc: list[Any], msg: str
) -> None:
    resp = client.post("/rerank", json=body)
    assert resp.status_code == 422, resp.text
    detail = resp.json()["detail"][0]
    assert detail["loc"] == loc and msg in detail["msg"]


def test_query_features_for_a_model_without_them(make_client) -> None:  # type: ignore[no-untyped-def]
    with make_client() as c:
        body = {
            "query": {"features": {"x": 1.0}},
            "candidates": [{"id": "a", "features": [0.0] * 5}],
        }
        resp = c.post("/rerank", json=body)
    assert resp.status_code == 422
    assert "this model takes no query features" in resp.json()["detail"][0]["msg"]


def test_old_models_still_need_candidate_features(make_client) -> None:  # type: ignore[no-untyped-def]
    with make_client() as c:
        resp = c.post("/rerank", json={"candidates": [{"id": "a"}]})
    assert resp.status_code == 422
    assert resp.json()["detail"][0]["loc"] == ["body", "candidates", 0, "features"]


@pytest.mark.parametrize(
    ("sources", "status"),
    [
        ({"qlen": "query", "hour": "query"}, 422),  # candidate features to send: required
        ({name: "query" for name in NAMES}, 200),  # none from the candidate: an id will do
    ],
)
def test_a_bare_id_is_enough_only_where_the_candidate_has_nothing_to_send(
    tmp_path: Path, model: TreeEnsemble, sources: dict[str, Any], status: int
) -> None:
    """A model with query features and no item features scored a bare id with every candidate
    feature missing, where a model without query features answered 422."""
    publish_sourced(tmp_path / "registry", model, sources, None, feature_names=NAMES)
    query = {name: 1.0 for name, source in sources.items() if source == "query"}
    body = {"query": {"features": query}, "candidates": [{"id": "a"}, {"id": "b"}]}
    with TestClient(create_app(app_settings(registry=tmp_path / "registry"))) as c:
        wait_ready(c)
        resp = c.post("/rerank", json=body)
    assert resp.status_code == status, resp.text
    if status == 422:
        detail = resp.json()["detail"][0]
        assert detail["loc"] == ["body", "candidates", 0, "features"]
        assert detail["msg"] == "field required"


def test_models_lists_the_sources(client: TestClient) -> None:
    info = client.get("/models").json()["models"][0]
    assert info["feature_names"] == ["bm25", "title"]
    assert info["query_features"] == ["qlen", "hour"]
    assert info["item_features"] == ["price", "ctr", "pop", "rating"]
    assert info["item_set"] == "catalog"


def test_served_logged_and_reread_rows_are_bit_identical(
    registry: Path, tmp_path: Path, model, table
) -> None:
    log_file = tmp_path / "imp.jsonl"
    settings = app_settings(registry=registry, impressions_enabled=True, impressions_jsonl=log_file)
    seen: list[np.ndarray] = []
    ids = ["d5", "d9", "missing-item", "d30"]
    cand = {"bm25": [1.5, None, 3.25, -2.0], "title": [None, 0.1, 0.2, 0.3]}
    query = {"qlen": 4.0, "hour": 23.0}
    with TestClient(create_app(settings)) as c:
        wait_ready(c)
        scorer = c.app.state.registry.get("m").scorer  # type: ignore[attr-defined]
        score = scorer.score

        def recording(features: np.ndarray, user: np.ndarray | None = None) -> np.ndarray:
            seen.append(features.copy())
            return score(features, user)

        scorer.score = recording
        cands = [
            {"id": i, "features": {k: v[r] for k, v in cand.items() if v[r] is not None}}
            for r, i in enumerate(ids)
        ]
        body = {"request_id": "r1", "query": {"features": query}, "candidates": cands}
        served = c.post("/rerank", json=body).json()
    (scored,) = seen
    expected = expected_rows(table, ids, cand, query)
    assert scored.tobytes() == expected.tobytes()  # NaN bit patterns included
    order = [ids.index(r["id"]) for r in served["results"]]
    logged = read_logs(log_file).impressions[0].features
    assert logged.tobytes() == scored[order].tobytes()
    reread = join_logs(read_logs(log_file)).dataset.features
    assert reread.tobytes() == scored[order].tobytes()


IDS = ["d3", "d17", "d0", "nope"]
CAND = {"bm25": [1.0, 2.0, None, 4.0], "title": [0.5, None, 1.5, 2.5]}
CANDS = [{"id": i, "features": [CAND["bm25"][r], CAND["title"][r]]} for r, i in enumerate(IDS)]


def mgets_seen_at(
    monkeypatch: pytest.MonkeyPatch, module: Any, name: str, probe: redis.Redis
) -> list[int]:
    """Records Redis's MGET count whenever module.name is called."""
    seen: list[int] = []
    wrapped = getattr(module, name)

    def observed(*args: Any, **kwargs: Any) -> Any:
        seen.append(_mget_calls(probe))
        return wrapped(*args, **kwargs)

    monkeypatch.setattr(module, name, observed)
    return seen


def test_the_redis_fetch_goes_out_before_the_features_are_parsed(
    registry: Path, model, table, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The item fetch's round trip overlaps the parse of the candidates' own features: Redis
    has the MGET before the candidates' features are read (by the body scan's matrix or
    build_matrix), and the answer is what the rows say."""
    push_item_set(redis.Redis.from_url(redis_server.url), "ltr:", "catalog", table)
    probe = redis.Redis.from_url(redis_server.url)
    seen = mgets_seen_at(monkeypatch, assembly, "_candidate_matrix", probe)
    settings = app_settings(
        registry=registry,
        redis_url=redis_server.url,
        redis_deadline_ms=2000,
        item_row_cache_rows=0,  # the same ids again: every row asked of Redis
    )
    with TestClient(create_app(settings)) as c:
        wait_ready(c)
        c.post("/rerank", json={"candidates": CANDS})  # learns the set's live version
        before = _mget_calls(probe)
        resp = c.post("/rerank", json={"query": {"features": [2.0, 9.0]}, "candidates": CANDS})
    assert seen[-1] == before + 1  # sent before the parse began
    check_answer(resp, model, table)


def check_answer(resp: Any, model: TreeEnsemble, table: Any) -> None:
    out = resp.json()
    assert resp.status_code == 200 and out["reasons"] == ["item_features_missing"]
    rows = expected_rows(table, IDS, CAND, {"qlen": 2.0, "hour": 9.0})
    assert scores_of(out) == pytest.approx(
        dict(zip(IDS, predict(model, rows).tolist(), strict=True)), rel=1e-9
    )


PARSED_IN: list[str] = []  # the threads parse_waits_for's parses ran in, in order
PARSE_THREAD = "ltr-parse"  # app.api.admission.parse_pool's threads' names begin so


@pytest.fixture(autouse=True)
def _parsed_in() -> None:
    PARSED_IN.clear()


def parse_waits_for(monkeypatch: pytest.MonkeyPatch, done: Callable[[], bool]) -> list[bool]:
    """Makes the body's parse (in its thread) wait, up to 5 s, until `done()`; records for
    each parse whether it came true. It can only while the parse waits if the event loop
    does the work meanwhile: a loop awaiting the parse first would leave it False."""
    seen: list[bool] = []
    wrapped = admission.decode_request

    def waiting(*args: Any, **kwargs: Any) -> Any:
        end = time.monotonic() + 5.0
        while not done() and time.monotonic() < end:
            time.sleep(0.005)
        seen.append(done())
        PARSED_IN.append(threading.current_thread().name)
        return wrapped(*args, **kwargs)

    monkeypatch.setattr(admission, "decode_request", waiting)
    return seen


@pytest.mark.parametrize("alone_here", [0, 1 << 20])  # in its thread / here when alone
def test_a_large_bodys_redis_fetch_goes_out_while_it_is_parsed(
    registry: Path,
    model,
    table,
    redis_server: RedisServer,
    monkeypatch: pytest.MonkeyPatch,
    alone_here: int,
) -> None:
    """A body parsed off the loop, or on it as the only request in flight: the ids found by
    the shed path's byte walk send the MGET before the parse, which Redis answers while the
    body is parsed, and the parse's ids then take its reply. A body naming a model the
    registry lacks sends nothing (the parse answers 404)."""
    push_item_set(redis.Redis.from_url(redis_server.url), "ltr:", "catalog", table)
    probe = redis.Redis.from_url(redis_server.url)
    settings = app_settings(
        registry=registry,
        redis_url=redis_server.url,
        redis_deadline_ms=2000,
        parse_off_loop_min_bytes=0,
        parse_alone_here_max_bytes=alone_here,
        item_row_cache_rows=0,  # the same ids again: every row asked of Redis
    )
    with TestClient(create_app(settings)) as c:
        wait_ready(c)
        c.post("/rerank", json={"candidates": CANDS})  # learns the set's live version
        before = _mget_calls(probe)
        seen = parse_waits_for(monkeypatch, lambda: _mget_calls(probe) > before)
        resp = c.post("/rerank", json={"query": {"features": [2.0, 9.0]}, "candidates": CANDS})
        after = _mget_calls(probe)
        monkeypatch.undo()
        unknown = c.post("/rerank", json={"model": "other", "candidates": CANDS})
        assert unknown.status_code == 404, unknown.text
        assert _mget_calls(probe) == after
    assert seen == [True] and after == before + 1  # one MGET, sent while the parse ran
    assert PARSED_IN[0].startswith(PARSE_THREAD) is (alone_here == 0), PARSED_IN
    check_answer(resp, model, table)


def count_lookups(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that gets an entry for each snapshot lookup from now on."""
    looked_up: list[int] = []
    lookup = ItemSnapshot.lookup

    def counted(self: ItemSnapshot, *args: Any, **kwargs: Any) -> Any:
        looked_up.append(1)
        return lookup(self, *args, **kwargs)

    monkeypatch.setattr(ItemSnapshot, "lookup", counted)
    return looked_up


def test_a_large_bodys_snapshot_lookup_runs_while_it_is_parsed(
    registry: Path, model, table, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The in-process lookup of a body parsed off the loop is done on the loop while the
    parse runs in its thread (not after it), and the answer is what the rows say."""
    looked_up = count_lookups(monkeypatch)
    settings = app_settings(
        registry=registry, parse_off_loop_min_bytes=0, parse_alone_here_max_bytes=0
    )
    with TestClient(create_app(settings)) as c:
        wait_ready(c)
        seen = parse_waits_for(monkeypatch, lambda: bool(looked_up))
        resp = c.post("/rerank", json={"query": {"features": [2.0, 9.0]}, "candidates": CANDS})
    assert seen == [True] and len(looked_up) == 1  # done once, while the parse ran
    assert PARSED_IN[0].startswith(PARSE_THREAD), PARSED_IN
    check_answer(resp, model, table)


def test_a_lone_requests_body_is_parsed_here_then_looked_up(
    registry: Path, model, table, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The only request in flight: its body (above LTR_PARSE_OFF_LOOP_MIN_BYTES, within
    LTR_PARSE_ALONE_HERE_MAX_BYTES) is parsed on the loop, and the snapshot looked up after
    it, once; a body above the alone limit goes to the parse thread as before."""
    looked_up = count_lookups(monkeypatch)
    body = orjson.dumps({"query": {"features": [2.0, 9.0]}, "candidates": CANDS})
    settings = app_settings(
        registry=registry,
        parse_off_loop_min_bytes=0,
        parse_alone_here_max_bytes=len(body),
    )
    with TestClient(create_app(settings)) as c:
        wait_ready(c)
        seen = parse_waits_for(monkeypatch, lambda: bool(looked_up))
        headers = {"content-type": "application/json"}
        resp = c.post("/rerank", content=body, headers=headers)
        assert seen == [False] and len(looked_up) == 1  # after the parse, not beside it
        assert len(PARSED_IN) == 1 and not PARSED_IN[0].startswith(PARSE_THREAD), PARSED_IN
        check_answer(resp, model, table)
        longer = c.post("/rerank", content=body + b" ", headers=headers)
        assert seen == [False, True] and PARSED_IN[1].startswith(PARSE_THREAD), PARSED_IN
        check_answer(longer, model, table)


def _mget_calls(client: redis.Redis) -> int:
    return int(client.info("commandstats").get("cmdstat_mget", {}).get("calls", 0))


def test_too_many_candidates_are_refused_without_asking_redis(
    registry: Path, table, redis_server: RedisServer
) -> None:
    push_item_set(redis.Redis.from_url(redis_server.url), "ltr:", "catalog", table)
    probe = redis.Redis.from_url(redis_server.url)
    settings = app_settings(registry=registry, redis_url=redis_server.url, max_candidates=5)
    with TestClient(create_app(settings)) as c:
        wait_ready(c)
        before = _mget_calls(probe)
        resp = c.post("/rerank", json={"candidates": [{"id": f"d{i}"} for i in range(6)]})
        assert resp.status_code == 422, resp.text
        assert _mget_calls(probe) == before
        ok = c.post("/rerank", json={"candidates": [{"id": f"d{i}"} for i in range(5)]})
        assert ok.status_code == 200 and _mget_calls(probe) > before


@pytest.mark.parametrize("off_loop_min_bytes", [None, 0])  # fetched in assembly / before parse
def test_duplicate_ids_are_refused_after_an_early_fetch_and_redis_keeps_serving(
    registry: Path, model, table, redis_server: RedisServer, off_loop_min_bytes: int | None
) -> None:
    """The fetch went out before the parse found the duplicate: the answer is the 422, the
    fetch finishes on its own, and the next request is served from Redis as usual."""
    push_item_set(redis.Redis.from_url(redis_server.url), "ltr:", "catalog", table)
    extra = {} if off_loop_min_bytes is None else {"parse_off_loop_min_bytes": off_loop_min_bytes}
    settings = app_settings(
        registry=registry, redis_url=redis_server.url, redis_deadline_ms=2000, **extra
    )
    with TestClient(create_app(settings)) as c:
        wait_ready(c)
        for _ in range(3):
            dup = c.post("/rerank", json={"candidates": [{"id": "d1"}, {"id": "d2"}, {"id": "d1"}]})
            assert dup.status_code == 422, dup.text
            assert "d1" in dup.text
        ok = c.post("/rerank", json={"candidates": [{"id": "d1"}, {"id": "d2"}, {"id": 7}]})
    out = ok.json()
    assert ok.status_code == 200 and out["degraded"] is False, out
    assert out["item_features_missing"] == 1  # 7 is no item of the table (d0..d49)
