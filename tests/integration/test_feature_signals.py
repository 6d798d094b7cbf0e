"""What the service says about query and item features, over real HTTP: uvicorn and
redis-server as processes (a held-out trial's findings).

Missing query features are counted in the answer, its reasons and /metrics; /models gives the
item set's trained and live versions; an item key holding a list is a row Redis lost, logged
with its key; both impression sinks set is warned about at start; an empty id is an id.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from tests.support import random_ensemble
from tests.support.redis_server import RedisServer, redis_binary
from tests.support.sourced_model import item_table, publish_sourced
from tests.support.uvicorn_server import UvicornServer, uvicorn_server
from trainer.features.item_table import ItemTable
from trainer.features.redis_sets import push_item_set

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NAMES = ["bm25", "query_length", "hour", "price", "ctr"]
SOURCES: dict[str, Any] = {"query_length": "query", "hour": "query", "price": "item", "ctr": "item"}
IDS = [f"d{i}" for i in range(8)]


@dataclass
class Stack:
    redis: RedisServer
    service: UvicornServer
    table: ItemTable
    jsonl: Path

    def push(self, table: ItemTable | None = None) -> str:
        client = redis.Redis.from_url(self.redis.url)
        return push_item_set(client, "ltr:", "catalog", table or self.table).version

    def rerank(self, **body: Any) -> dict[str, Any]:
        body.setdefault("candidates", [{"id": i, "features": [0.5]} for i in IDS])
        resp = httpx.post(f"{self.service.url}/rerank", json=body, timeout=10)
        assert resp.status_code == 200, resp.text
        return dict(resp.json())

    def model_info(self) -> dict[str, Any]:
        return dict(httpx.get(f"{self.service.url}/models", timeout=10).json()["models"][0])

    def query_missing_count(self) -> float:
        text = httpx.get(f"{self.service.url}/metrics", timeout=10).text
        found = re.search(r'^ltr_query_features_missing_total\{model="m"\} (\S+)$', text, re.M)
        return float(found.group(1)) if found else 0.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("signals")
    table = item_table(len(IDS), ["price", "ctr"], seed=3)
    model = random_ensemble(len(NAMES), num_trees=10, depth=3, seed=8)
    publish_sourced(root / "registry", model, SOURCES, table, feature_names=NAMES)
    jsonl = root / "impressions.jsonl"
    with ExitStack() as running:
        server = RedisServer(redis_binary()).start()
        running.callback(server.stop)
        env = {
            "LTR_REGISTRY": str(root / "registry"),
            "LTR_RELOAD_POLL_SECONDS": "0",
            "LTR_REDIS_URL": server.url,
            "LTR_REDIS_DEADLINE_MS": "1000",
            "LTR_REQUEST_BUDGET_MS": "5000",
            "LTR_IMPRESSIONS_ENABLED": "true",
            "LTR_IMPRESSIONS_JSONL": str(jsonl),
        }
        stack = Stack(server, running.enter_context(uvicorn_server(env)), table, jsonl)
        stack.push()
        yield stack


def test_missing_query_features_are_said_and_counted(stack: Stack) -> None:
    """Scored (the model's missing-value rule), not degraded, but said: a frontend that
    stopped sending its query features shows in the answer and in /metrics."""
    before = stack.query_missing_count()
    none = stack.rerank()
    one_null = stack.rerank(query={"features": {"query_length": 3, "hour": None}})
    one_left_out = stack.rerank(query={"features": {"hour": 14}})
    full = stack.rerank(query={"features": [3, 14]})
    for body, missing in ((none, 2), (one_null, 1), (one_left_out, 1)):
        assert body["query_features_missing"] == missing, body
        assert body["reasons"] == ["query_features_missing"] and body["degraded"] is False
    assert full["query_features_missing"] == 0 and full["reasons"] == []
    assert stack.query_missing_count() - before == 3


def test_models_gives_the_item_sets_trained_and_live_versions(stack: Stack) -> None:
    trained = stack.table.version()
    stack.rerank()  # the worker reads the set's pointer
    info = stack.model_info()
    assert info["item_set"] == "catalog"
    assert (info["item_set_version"], info["item_set_live_version"]) == (trained, trained)
    other = item_table(len(IDS), ["price", "ctr"], seed=4)
    try:
        pushed = stack.push(other)
        assert pushed != trained
        stack.rerank()
        info = stack.model_info()
        assert (info["item_set_version"], info["item_set_live_version"]) == (trained, pushed)
    finally:
        stack.push()
        stack.rerank()


def test_an_item_key_holding_a_list_is_a_lost_row_named_in_the_log(stack: Stack) -> None:
    """MGET reads a key of another type as nil: under the snapshot's own version that row is
    one Redis lost (from the snapshot, degraded), and the log names its key for the operator;
    pushing the live version again rewrites it."""
    version = stack.push()
    key = f"ltr:item:catalog:{version}:d4"
    client = redis.Redis.from_url(stack.redis.url)
    client.delete(key)
    client.rpush(key, "x")
    body = stack.rerank()
    assert body["reasons"][:2] == ["item_rows_lost_in_redis", "item_features_from_snapshot"]
    assert body["degraded"] and body["item_features_missing"] == 0
    assert "item_store_redis_bad_value" not in body["reasons"]
    logged = [line for line in stack.service.log().splitlines() if "item set catalog" in line]
    assert len(logged) == 1 and repr(key) in logged[0], stack.service.log()
    assert "absent from Redis or not a string" in logged[0]
    stack.push()  # the live version again: the list is overwritten with the row
    assert client.type(key) == b"string"
    repaired = stack.rerank()
    assert not repaired["degraded"] and "item_rows_lost_in_redis" not in repaired["reasons"]


def test_both_impression_sinks_set_is_one_warning_and_redis_wins(stack: Stack) -> None:
    stack.rerank(request_id="both-sinks")
    client = redis.Redis.from_url(stack.redis.url)
    end = time.monotonic() + 5
    while not client.exists("ltr:imp:both-sinks"):  # written by the background sink
        assert time.monotonic() < end, "the impression never reached Redis"
        time.sleep(0.05)
    warned = [line for line in stack.service.log().splitlines() if "LTR_IMPRESSIONS_JSONL" in line]
    assert len(warned) == 1, stack.service.log()
    assert "LTR_REDIS_URL and LTR_IMPRESSIONS_JSONL are both set: Redis wins" in warned[0]
    assert str(stack.jsonl) in warned[0] and not stack.jsonl.exists()


def test_an_empty_id_is_an_id_the_item_store_lacks(stack: Stack) -> None:
    """docs/API.md: ids are opaque, `""` included; the store knows no such item."""
    body = stack.rerank(candidates=[{"id": ""}, {"id": "d1"}], query={"features": [1, 2]})
    assert body["item_features_missing"] == 1 and body["reasons"] == ["item_features_missing"]
    assert {r["id"] for r in body["results"]} == {"", "d1"}
