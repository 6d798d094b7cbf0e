"""A sink that cannot write logs the outage once when it starts and once when it ends, with a
reminder at most once a minute: it logged `dropped 1 log records: Error 111 ...` per request
(208 lines in 10 s with Redis down)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from app.impressions.sink import ImpressionSink, RedisStreamWriter
from tests.app.impressions.conftest import dropped
from tests.support.manual_clock import ManualClock
from tests.support.redis_server import free_port

SINK_LOG = "app.impressions.sink"


class Switchable:
    """Fails with Redis's refusal while `down`."""

    def __init__(self) -> None:
        self.down = True
        self.written = 0

    async def write(self, records: list[dict[str, Any]]) -> None:
        if self.down:
            raise ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
        self.written += len(records)

    async def check(self) -> None:
        await self.write([])

    async def close(self) -> None:
        return None


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == SINK_LOG]


def _one_request(sink: ImpressionSink) -> None:
    """A request's record, written as the drain task would: one batch of one."""
    sink.submit({"kind": "feedback", "request_id": "r", "ts": 0.0, "events": []})
    asyncio.run(sink.flush())


def test_an_outage_is_logged_when_it_starts_and_ends_not_per_request(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, SINK_LOG)
    clock, writer = ManualClock(), Switchable()
    sink = ImpressionSink(writer, queue_size=10, clock=clock)
    before = dropped("feedback", "sink_error")

    for _ in range(200):
        _one_request(sink)
        clock.advance(0.05)  # 200 requests in 10 s
    lines = _lines(caplog)
    assert len(lines) == 1, lines
    assert "cannot be written (Error 111" in lines[0]
    assert dropped("feedback", "sink_error") == before + 200  # the metrics count every one

    writer.down = False
    _one_request(sink)
    _one_request(sink)
    lines = _lines(caplog)
    assert len(lines) == 2, lines
    assert "written again after 10 s (200 records dropped meanwhile)" in lines[1]
    assert writer.written == 2


def test_a_long_outage_is_recalled_at_most_once_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, SINK_LOG)
    clock = ManualClock()
    sink = ImpressionSink(Switchable(), queue_size=10, clock=clock)
    for _ in range(300):  # 150 s at two requests a second
        _one_request(sink)
        clock.advance(0.5)
    lines = _lines(caplog)
    assert len(lines) == 3, lines  # the start, then a reminder each minute
    assert all("still cannot be written" in line for line in lines[1:])
    assert "120 records dropped in the last 60 s" in lines[1]


def test_with_redis_down_the_drain_task_logs_once(caplog: pytest.LogCaptureFixture) -> None:
    """Against a real client: a port nothing listens on, as a Redis that is down."""
    import redis.asyncio as aioredis

    caplog.set_level(logging.INFO, SINK_LOG)
    client = aioredis.Redis.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=1)

    async def go() -> None:
        sink = ImpressionSink(RedisStreamWriter(client, "ltr:", 100, 60), queue_size=100)
        await sink.start()
        for _ in range(30):
            sink.submit({"kind": "feedback", "request_id": "r", "ts": 0.0, "events": []})
            await asyncio.sleep(0.01)
        await sink.close()

    asyncio.run(go())
    lines = _lines(caplog)
    assert len(lines) == 1, lines
    assert "cannot be written" in lines[0]
