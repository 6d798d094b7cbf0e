"""The waiting connection pool against a real redis-server."""

from __future__ import annotations

import asyncio
import time

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from app.redis_pool import WaitingPool, waiting_client
from tests.support.redis_server import RedisServer


def test_a_command_waits_for_a_freed_connection_then_gives_up(redis_server: RedisServer) -> None:
    async def go() -> tuple[bytes, float]:
        client = waiting_client(redis_server.url, 1, wait_s=0.2)
        pool = client.connection_pool
        assert isinstance(pool, WaitingPool)
        held = await pool.get_connection()
        late = asyncio.ensure_future(client.ping())
        await asyncio.sleep(0.05)
        assert not late.done()  # waiting, not refused
        await pool.release(held)
        assert await late is True
        held = await pool.get_connection()
        started = time.monotonic()
        with pytest.raises(RedisConnectionError, match=r"no Redis connection free within 0\.2 s"):
            await client.set("k", "v")
        waited = time.monotonic() - started
        await pool.release(held)
        await client.set("k", b"v")
        value = await client.get("k")
        await client.aclose()
        return value, waited

    value, waited = asyncio.run(go())
    assert value == b"v" and 0.19 <= waited < 1.0


def test_a_woken_waiter_that_leaves_passes_its_turn_on(redis_server: RedisServer) -> None:
    """A waiter woken by a release but cancelled (its request timed out) before it ran would
    leave the connection idle while the next waiter slept on (5 s here)."""

    async def go() -> float:
        client = waiting_client(redis_server.url, 1, wait_s=5.0)
        pool = client.connection_pool
        held = await pool.get_connection()
        first = asyncio.ensure_future(pool.get_connection())
        second = asyncio.ensure_future(pool.get_connection())
        await asyncio.sleep(0.05)
        assert not first.done() and not second.done()
        await pool.release(held)  # wakes the first
        first.cancel()  # before it runs
        started = time.monotonic()
        conn = await asyncio.wait_for(second, 2.0)
        waited = time.monotonic() - started
        await pool.release(conn)
        await client.aclose()
        return waited

    assert asyncio.run(go()) < 0.5
