"""The reload listener logs a Redis outage when it starts and when it ends: it logged a
WARNING at every reconnect attempt (every 5 s) for the whole outage."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest

from app.registry.reload_events import listen_for_reloads
from app.settings import Settings
from tests.support.redis_server import RedisServer

LISTENER_LOG = "app.registry.reload_events"


def test_an_outage_is_logged_once_when_it_starts_and_once_when_it_ends(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, LISTENER_LOG)
    settings = Settings(redis_url=redis_server.url, redis_prefix="t:")
    redis_server.kill()

    def warnings() -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.name == LISTENER_LOG and r.levelno >= logging.WARNING
        ]

    async def on_event(model: str, version: str) -> None:
        return None

    async def scenario() -> None:
        task = asyncio.create_task(
            listen_for_reloads(settings, on_event, min_backoff=0.01, max_backoff=0.02)
        )
        try:
            await asyncio.sleep(1.0)  # dozens of attempts
            assert len(warnings()) == 1, warnings()
            redis_server.start()
            for _ in range(500):
                if len(warnings()) > 1:
                    break
                await asyncio.sleep(0.01)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    asyncio.run(scenario())
    lines = warnings()
    assert len(lines) == 2, lines
    assert "ConnectionError" in lines[0] and "logged again when it answers" in lines[0]
    assert "redis answers again after" in lines[1]
