"""What a worker logs about Redis: each state change once, bad values rate-limited."""

from __future__ import annotations

import logging

import pytest
import redis

from app.artifacts.manifest import Manifest
from app.features.redis_fault_log import BAD_VALUES_PER_INTERVAL, RedisFaultLog
from app.features.user_features import UserFeatureResolver
from tests.app.features.test_user_features import PREFIX, US_USER, _push, _settings, _with_resolver
from tests.support.manual_clock import ManualClock
from tests.support.redis_server import RedisServer

LOGGER = "app.features.redis_store"
ANONYMOUS = {"profile": US_USER["profile"]}  # one Redis call per request


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_an_outage_logs_each_state_change_once(
    redis_server: RedisServer, manifest: Manifest, caplog: pytest.LogCaptureFixture
) -> None:
    settings = _settings(
        redis_server.url,
        redis_cache_ttl_seconds=0,
        breaker_failure_threshold=2,
        breaker_reset_seconds=0.5,
    )
    clock = ManualClock()

    async def body(resolver: UserFeatureResolver) -> None:
        _push(redis_server, manifest)
        await resolver.resolve(manifest, ANONYMOUS)
        redis_server.kill()
        for _ in range(6):  # 2 failures open the breaker, 4 requests meet it open
            await resolver.resolve(manifest, ANONYMOUS)
        clock.advance(0.6)
        await resolver.resolve(manifest, ANONYMOUS)  # the probe fails: open again, no news
        redis_server.start()
        _push(redis_server, manifest)
        clock.advance(0.6)
        assert (await resolver.resolve(manifest, ANONYMOUS)).reasons == []
        for _ in range(3):
            await resolver.resolve(manifest, ANONYMOUS)

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        _with_resolver(settings, manifest, body, clock=clock)
    lines = _lines(caplog)
    assert len(lines) == 4, lines
    assert lines[0].startswith("redis unreachable (redis_unavailable)")
    assert lines[1].startswith("redis circuit breaker opened")
    assert lines[2] == "redis answers again"
    assert lines[3].startswith("redis circuit breaker closed")


def test_a_bad_value_is_logged_at_most_once_a_minute(
    redis_server: RedisServer, manifest: Manifest, caplog: pytest.LogCaptureFixture
) -> None:
    _push(redis_server, manifest)
    with redis.Redis.from_url(redis_server.url) as client:
        client.hset(f"{PREFIX}user:u2", "a", "b")  # WRONGTYPE for an override
    settings = _settings(redis_server.url, redis_cache_ttl_seconds=0)
    clock = ManualClock()
    user = {"id": "u2", "profile": US_USER["profile"]}

    async def body(resolver: UserFeatureResolver) -> list[int]:
        seen = []
        for step in (0.0, 1.0, 58.9, 0.1, 1.0):
            clock.advance(step)
            got = await resolver.resolve(manifest, user)
            assert got.reasons == ["redis_bad_value"]
            seen.append(len(_lines(caplog)))
        return seen

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        seen = _with_resolver(settings, manifest, body, clock=clock)
    assert seen == [1, 1, 1, 2, 2]
    assert "'t:user:u2' holds a bad value: WRONGTYPE" in _lines(caplog)[0]


def test_many_bad_keys_are_capped_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    faults = RedisFaultLog(clock)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for i in range(BAD_VALUES_PER_INTERVAL + 5):
            faults.bad_value(f"user:{i}", "WRONGTYPE")
        assert len(_lines(caplog)) == BAD_VALUES_PER_INTERVAL
        clock.advance(60.0)
        faults.bad_value("user:new", "WRONGTYPE")
    lines = _lines(caplog)
    assert len(lines) == BAD_VALUES_PER_INTERVAL + 1
    assert lines[-1].endswith("(5 more bad values not logged)")


def test_brief_outages_soon_after_one_are_counted_not_logged_each(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A soak trial on a saturated host: lookups timing out now and then logged two lines per
    blip (1,932 lines in 55 minutes)."""
    caplog.set_level(logging.WARNING, logger=LOGGER)
    clock = ManualClock(100.0)
    faults = RedisFaultLog(clock)
    faults.failed("redis_timeout")
    faults.answered()  # the first outage: both lines
    for _ in range(30):  # blips within a minute of the last end: silent
        clock.now += 1.0
        faults.failed("redis_timeout")
        faults.answered()
    clock.now += 1.0
    faults.failed("redis_timeout")
    clock.now += 6.0
    faults.failed("redis_timeout")  # one that lasts: logged, and its end
    faults.answered()
    clock.now += 61.0
    faults.failed("redis_unavailable")  # a minute after the last end: at once
    assert _lines(caplog) == [
        "redis unreachable (redis_timeout); serving from the in-process copies",
        "redis answers again",
        "redis unreachable for 6 s (redis_timeout); serving from the in-process copies "
        "(30 brief outages since the last report not logged)",
        "redis answers again",
        "redis unreachable (redis_unavailable); serving from the in-process copies",
    ]
