"""The item batches' own breaker: a link that times out large batches while small calls answer
sends item lookups to the snapshot at once instead of each waiting out the deadline."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from prometheus_client import REGISTRY

import app.features.item_redis as item_redis
from app.artifacts.manifest import ItemFeatureSet
from app.features.item_store import ItemFeatureStore
from app.features.redis_store import RedisStore
from app.settings import Settings
from tests.app.features.test_item_store import NAMES, WANTED, snapshot_of
from tests.support.redis_server import RedisServer
from tests.support.sourced_model import item_table
from trainer.features.redis_sets import push_item_set

DEADLINE_MS = 30
THRESHOLD = 3
RESET_S = 0.4


def _slowed(pipelined: Callable[..., Any], slow: list[bool]) -> Callable[..., Any]:
    """The item backend's pipelines, each first held for twice the deadline while `slow[0]`
    (what a slow link does to half-megabyte batches), the small calls untouched."""

    def wrapped(*args: Any) -> Callable[[Any], Awaitable[Any]]:
        call = pipelined(*args)

        async def run(client: Any) -> Any:
            if slow[0]:
                await asyncio.sleep(2 * DEADLINE_MS / 1000)
            return await call(client)

        return run

    return wrapped


def test_item_batches_timing_out_open_their_breaker_while_small_calls_answer(
    redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = item_table(50, NAMES, seed=1)
    push_item_set(redis.Redis.from_url(redis_server.url), "ltr:", "s", table)
    snapshot = snapshot_of(table, tmp_path)
    slow = [True]
    monkeypatch.setattr(item_redis, "_pipelined", _slowed(item_redis._pipelined, slow))
    settings = Settings(
        redis_url=redis_server.url,
        redis_deadline_ms=DEADLINE_MS,
        breaker_failure_threshold=THRESHOLD,
        breaker_reset_seconds=RESET_S,
    )
    items = ItemFeatureSet(set="s", names=NAMES)

    def kind_open() -> float | None:
        return REGISTRY.get_sample_value("ltr_redis_kind_circuit_open", {"kind": "item_batches"})

    async def scenario() -> list[tuple[list[str], float]]:
        store = RedisStore(settings)
        await store.start()
        item_store = ItemFeatureStore(settings, store)
        seen: list[tuple[list[str], float]] = []

        async def one() -> None:
            started = time.perf_counter()
            got = await item_store.fetch(items, WANTED, snapshot, ["d1", "d2"])
            seen.append((got.reasons, time.perf_counter() - started))
            # A small call (a user feature's GET) answers in between, as in the trial.
            _, error = await store.run(store.new_deadline(), lambda c: c.ping())
            assert error is None and store.breaker.state == "closed"

        try:
            for _ in range(THRESHOLD + 3):
                await one()
            assert item_store.redis is not None
            assert item_store.redis.breaker.breaker.state == "open" and kind_open() == 1
            slow[0] = False  # the link is well again
            await asyncio.sleep(RESET_S)
            await one()  # the probe
            await one()
            assert item_store.redis.breaker.breaker.state == "closed" and kind_open() == 0
        finally:
            await store.close()
        return seen

    seen = asyncio.run(scenario())
    timed_out, refused, recovered = seen[:THRESHOLD], seen[THRESHOLD:-2], seen[-2:]
    for reasons, _ in timed_out:
        assert reasons == ["item_store_redis_timeout", "item_features_from_snapshot"]
    for reasons, took in refused:
        assert reasons == ["item_store_circuit_open", "item_features_from_snapshot"]
        assert took < DEADLINE_MS / 1000 / 2, took  # at once: no wait for the deadline
    for reasons, _ in recovered:
        assert reasons == []
