"""Item features from Redis under faults, end to end: uvicorn, redis-server and `ltr features
push` as real processes.

The model version carries a snapshot of the item set; Redis holds a different version of the
same items (other values), so the scores say which store answered.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import redis

from app.scoring.reference import predict
from tests.support import random_ensemble
from tests.support.machine_stalls import StallWatch
from tests.support.redis_server import RedisServer, redis_binary
from tests.support.sourced_model import item_table, publish_sourced
from tests.support.uvicorn_server import REPO, UvicornServer, uvicorn_server
from trainer.features.item_table import ItemTable
from trainer.features.redis_sets import push_item_set

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DEADLINE_MS = 50.0
NAMES = ["bm25", "price", "ctr"]
SOURCES: dict[str, Any] = {"price": "item", "ctr": "item"}
ITEMS = ["price", "ctr"]
IDS = [f"d{i}" for i in range(20)]
ENSEMBLE = random_ensemble(len(NAMES), num_trees=30, depth=3, seed=3)
OUTAGE = {
    "item_store_redis_unavailable",
    "item_store_redis_timeout",
    "item_store_circuit_open",
    "item_store_redis_over_budget",  # the request's budget ended the wait first
}


def scores_with(table: ItemTable | None) -> dict[str, float]:
    rows = np.full((len(IDS), len(NAMES)), np.nan, dtype=np.float32)
    rows[:, 0] = np.arange(len(IDS)) / 10
    if table is not None:
        where = {i: k for k, i in enumerate(table.ids.tolist())}
        for r, cid in enumerate(IDS):
            rows[r, 1:] = table.matrix[where[cid]]
    return dict(zip(IDS, predict(ENSEMBLE, rows).tolist(), strict=True))


@dataclass
class Stack:
    redis: RedisServer
    service: UvicornServer
    snapshot: ItemTable
    remote: ItemTable

    def body(self, model: str = "m") -> dict[str, Any]:
        cands = [{"id": i, "features": [r / 10]} for r, i in enumerate(IDS)]
        return {"model": model, "candidates": cands}

    def push(self) -> None:
        push_item_set(redis.Redis.from_url(self.redis.url), "ltr:", "catalog", self.remote)


def scored(body: dict[str, Any]) -> dict[str, float]:
    return {r["id"]: r["score"] for r in body["results"]}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    registry = tmp_path_factory.mktemp("registry")
    snapshot = item_table(len(IDS), ITEMS, seed=1)
    snapshot.matrix[np.isnan(snapshot.matrix)] = 0.5
    remote = item_table(len(IDS), ITEMS, seed=2)
    remote.matrix[np.isnan(remote.matrix)] = -0.5
    publish_sourced(registry, ENSEMBLE, SOURCES, snapshot, name="m", feature_names=NAMES)
    publish_sourced(
        registry, ENSEMBLE, SOURCES, snapshot, name="nosnap", feature_names=NAMES, snapshot=False
    )
    server = RedisServer(redis_binary()).start()
    env = {
        "LTR_REGISTRY": str(registry),
        "LTR_RELOAD_POLL_SECONDS": "0",
        "LTR_REDIS_URL": server.url,
        "LTR_REDIS_DEADLINE_MS": str(DEADLINE_MS),
        # Redis faults only: a loaded machine must not shed a request past the 100 ms budget.
        "LTR_REQUEST_BUDGET_MS": "5000",
        "LTR_BREAKER_FAILURE_THRESHOLD": "3",
        "LTR_BREAKER_RESET_SECONDS": "0.5",
        "LTR_DEFAULT_MODEL": "m",
    }
    try:
        with uvicorn_server(env) as service:
            stack = Stack(server, service, snapshot, remote)
            stack.push()
            yield stack
    finally:
        server.stop()


@pytest.fixture
def live(stack: Stack) -> Stack:
    if stack.redis.paused:
        stack.redis.resume()
    if stack.redis.proc is None:
        stack.redis.start()
    stack.push()
    end = time.monotonic() + 5
    with httpx.Client(base_url=stack.service.url, timeout=10) as client:
        while client.post("/rerank", json=stack.body()).json()["degraded"]:
            assert time.monotonic() < end, "Redis never answered"
            time.sleep(0.05)
    return stack


def test_scores_come_from_redis_then_the_snapshot_then_missing(live: Stack) -> None:
    with httpx.Client(base_url=live.service.url, timeout=10) as client:
        body = client.post("/rerank", json=live.body()).json()
        assert body["reasons"] == [] and scored(body) == pytest.approx(scores_with(live.remote))
        live.redis.kill()
        down = client.post("/rerank", json=live.body()).json()
        assert down["degraded"] and "item_features_from_snapshot" in down["reasons"]
        assert scored(down) == pytest.approx(scores_with(live.snapshot))
        bare = client.post("/rerank", json=live.body("nosnap")).json()
        assert bare["degraded"] and bare["item_features_missing"] == len(IDS)
        assert "item_features_unavailable" in bare["reasons"]
        assert scored(bare) == pytest.approx(scores_with(None))


def _load(
    live: Stack, during: Any
) -> tuple[list[dict[str, Any]], list[str], list[tuple[float, float]]]:
    """Two clients' answers, failures and (start, end) times while `during` happens."""
    answers: list[dict[str, Any]] = []
    failures: list[str] = []
    spans: list[tuple[float, float]] = []
    stop = threading.Event()

    def fire() -> None:
        with httpx.Client(base_url=live.service.url, timeout=10) as client:
            while not stop.is_set():
                t0 = time.perf_counter()
                resp = client.post("/rerank", json=live.body())
                spans.append((t0, time.perf_counter()))
                if resp.status_code == 200:
                    answers.append(resp.json())
                else:
                    failures.append(f"{resp.status_code} {resp.text}")

    threads = [threading.Thread(target=fire) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.3)
        during()
        time.sleep(1.0)
    finally:
        stop.set()
        for t in threads:
            t.join()
    return answers, failures, spans


def test_redis_killed_under_load_no_5xx(live: Stack) -> None:
    answers, failures, _ = _load(live, live.redis.kill)
    assert failures == []
    degraded = [a for a in answers if a["degraded"]]
    assert degraded and all(set(a["reasons"]) & OUTAGE for a in degraded)
    assert all(scored(a) == pytest.approx(scores_with(live.snapshot)) for a in degraded)


@pytest.mark.usefixtures("no_gc_pauses")
def test_redis_paused_under_load_answers_within_the_deadline(live: Stack) -> None:
    with StallWatch() as machine:
        answers, failures, spans = _load(live, live.redis.pause)
    live.redis.resume()
    assert failures == []
    degraded = [a for a in answers if a["degraded"]]
    assert degraded and all(set(a["reasons"]) & OUTAGE for a in degraded), [
        a["reasons"] for a in degraded if not set(a["reasons"]) & OUTAGE
    ]
    # Two clients on a shared 2-core machine: the deadline plus queueing for the CPU, plus
    # any time the whole machine stood still (once 0.4 s in a loaded CI run).
    allowed = (DEADLINE_MS + 200.0) / 1000.0
    late = [
        (round((end - start) * 1000), round(stalled * 1000), answer["reasons"])
        for (start, end), answer in zip(spans, answers, strict=True)
        if end - start - (stalled := machine.stalled_during(start, end)) > allowed
    ]
    assert late == [], f"late answers (ms, of which the machine stalled ms, reasons): {late}"


def test_a_push_killed_half_way_changes_nothing_served(live: Stack, tmp_path: Path) -> None:
    n = 300_000
    big = tmp_path / "big.parquet"
    rng = np.random.default_rng(9)
    pq.write_table(
        pa.table(
            {
                "doc_id": [f"d{i}" for i in range(n)],
                "price": rng.normal(size=n).astype(np.float32),
                "ctr": rng.normal(size=n).astype(np.float32),
            }
        ),
        big,
    )
    client = redis.Redis.from_url(live.redis.url)
    before = client.get("ltr:itemset:catalog")
    keys_before = client.dbsize()
    args = [sys.executable, "-m", "trainer", "features", "push", "--items", str(big)]
    proc = subprocess.Popen(
        [*args, "--set", "catalog", "--redis-url", live.redis.url],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        end = time.monotonic() + 60
        while client.dbsize() < keys_before + n // 3:
            assert proc.poll() is None, "the push finished before it could be interrupted"
            assert time.monotonic() < end
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert client.get("ltr:itemset:catalog") == before
    with httpx.Client(base_url=live.service.url, timeout=10) as http:
        body = http.post("/rerank", json=live.body()).json()
    assert body["reasons"] == [] and scored(body) == pytest.approx(scores_with(live.remote))


def test_rows_lost_from_the_snapshots_version_are_served_from_it(live: Stack) -> None:
    client = redis.Redis.from_url(live.redis.url)
    version = push_item_set(client, "ltr:", "catalog", live.snapshot).version
    client.delete(*(f"ltr:item:catalog:{version}:{i}" for i in IDS[::3]))  # as if evicted
    with httpx.Client(base_url=live.service.url, timeout=10) as http:
        body = http.post("/rerank", json=live.body()).json()
    assert body["degraded"] and "item_rows_lost_in_redis" in body["reasons"]
    assert "item_features_from_snapshot" in body["reasons"]
    assert body["item_features_missing"] == 0
    assert scored(body) == pytest.approx(scores_with(live.snapshot))


def test_a_huge_pointer_is_no_live_set_and_opens_no_breaker(live: Stack) -> None:
    client = redis.Redis.from_url(live.redis.url)
    before = client.get("ltr:itemset:catalog")
    client.set("ltr:itemset:catalog", b"v" * (20 * 1024 * 1024))
    start = int(client.info("stats")["total_net_output_bytes"])
    try:
        with httpx.Client(base_url=live.service.url, timeout=10) as http:
            answers = [http.post("/rerank", json=live.body()).json() for _ in range(10)]
    finally:
        client.set("ltr:itemset:catalog", before or b"")
    for body in answers:
        assert body["reasons"][0] == "item_set_missing_in_redis", body["reasons"]
        assert not set(body["reasons"]) & OUTAGE
        assert scored(body) == pytest.approx(scores_with(live.snapshot))
    assert int(client.info("stats")["total_net_output_bytes"]) - start < 1024 * 1024
