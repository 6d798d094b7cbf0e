from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import pytest
import redis

from app.registry.reload_events import listen_for_reloads, parse_event
from app.settings import Settings
from tests.support.redis_server import RedisServer
from trainer.redis_publish import announce

PREFIX = "t:"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b'{"model": "m", "version": "v1"}', ("m", "v1")),
        ('{"model": "m", "version": "v1", "extra": 1}', ("m", "v1")),
        (b"not json", None),
        (b"\xff\xfe", None),
        (b'["m", "v1"]', None),
        (b'{"model": "m"}', None),
        (b'{"model": "m", "version": 3}', None),
        (b'{"model": "../etc", "version": "v1"}', None),
        (b'{"model": "m", "version": ""}', None),
        (b"[" * 100_000 + b"]" * 100_000, None),  # json's RecursionError
        (b'{"model": "m", "version": "v1", "pad": "' + b"x" * 5000 + b'"}', None),
    ],
)
def test_parse_event(data: bytes | str, expected: tuple[str, str] | None) -> None:
    assert parse_event(data) == expected


def test_without_redis_url_it_returns_at_once() -> None:
    calls: list[tuple[str, str]] = []

    async def record(model: str, version: str) -> None:
        calls.append((model, version))

    started = time.perf_counter()
    result = asyncio.run(
        asyncio.wait_for(listen_for_reloads(Settings(redis_url=None), record), 1.0)
    )
    assert result is None and calls == []
    assert time.perf_counter() - started < 0.5  # returned, not timed out


def _subscribers(server: RedisServer) -> int:
    with redis.Redis.from_url(server.url) as client:
        return int(client.pubsub_numsub(f"{PREFIX}events")[0][1])


async def _until(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not await asyncio.to_thread(check):
        assert time.monotonic() < end, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def test_announcements_reach_the_callback_across_a_redis_restart(
    redis_server: RedisServer,
) -> None:
    settings = Settings(redis_url=redis_server.url, redis_prefix=PREFIX)
    seen: list[tuple[str, str]] = []

    async def scenario() -> None:
        async def on_event(model: str, version: str) -> None:
            seen.append((model, version))
            if version == "boom":
                raise RuntimeError("a reload that fails must not stop the listener")

        task = asyncio.create_task(
            listen_for_reloads(settings, on_event, min_backoff=0.05, max_backoff=0.2)
        )
        try:
            await _until(lambda: _subscribers(redis_server) == 1, "the first subscription")
            with redis.Redis.from_url(redis_server.url) as client:
                client.publish(f"{PREFIX}events", "junk")
                client.publish(f"{PREFIX}events", '{"model": "m"}')
                client.publish(f"{PREFIX}events", "[" * 100_000 + "]" * 100_000)
            await asyncio.to_thread(announce, redis_server.url, PREFIX, "m", "boom")
            await asyncio.to_thread(announce, redis_server.url, PREFIX, "m", "v1")
            await _until(lambda: len(seen) >= 2, "two announcements")
            assert seen == [("m", "boom"), ("m", "v1")]

            redis_server.restart()
            await _until(lambda: _subscribers(redis_server) == 1, "a new subscription")
            # The subscription counted may still be replaced while redis-py settles its new
            # connection (seen under load: PUBLISH reached 0 listeners right after), and an
            # announcement without a listener is lost by design (the registry poll covers it).
            # So: announce until one is delivered, and require that it is.
            end = time.monotonic() + 10.0
            while ("m", "v2") not in seen:
                assert time.monotonic() < end, "no announcement got through after the restart"
                await asyncio.to_thread(announce, redis_server.url, PREFIX, "m", "v2")
                await asyncio.sleep(0.2)
            assert seen[2:] and set(seen[2:]) == {("m", "v2")}
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    asyncio.run(scenario())


def test_a_bad_url_ends_the_listener_instead_of_crashing_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[tuple[str, str]] = []

    async def record(model: str, version: str) -> None:
        calls.append((model, version))

    # Settings refuse such a URL (ltr serve stops); the listener still survives one.
    settings = Settings().model_copy(update={"redis_url": "not-a-redis-url"})
    with caplog.at_level(logging.ERROR, logger="app.registry.reload_events"):
        result = asyncio.run(asyncio.wait_for(listen_for_reloads(settings, record), 1.0))
    assert result is None and calls == []
    assert "not a usable Redis URL" in caplog.text
