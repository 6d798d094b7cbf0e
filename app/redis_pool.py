"""Redis clients whose connection pool waits for a free connection instead of failing.

redis-py's asyncio pool refuses a command at once ("Too many connections") once it holds 100
connections. A worker with hundreds of requests in flight reached that against a healthy
Redis: the reads failed as if Redis were down (degraded answers, a step towards opening the
breaker), and /feedback lookups made the impression sink's writes fail, which dropped their
records. Here a read past `max_connections` waits for one of them. redis-py's own
BlockingConnectionPool does too, but takes a lock and a timer on every command (15-20 us more
per read on this project's 2-vCPU VMs, where a read takes 150 us); this one waits only when the
pool is full.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError


class WaitingPool(aioredis.ConnectionPool):
    """A connection pool whose commands wait up to `wait_s` for a connection when all
    `max_connections` are in use (then ConnectionError, as redis-py's pools raise)."""

    def __init__(self, wait_s: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.wait_s = wait_s
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        until = asyncio.get_running_loop().time() + self.wait_s
        while True:
            if self.can_get_connection():
                try:
                    return await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]
                except RedisConnectionError:
                    if self.can_get_connection():
                        raise  # not for want of a connection (Redis refused one, say)
                    # taken by another caller while this one waited for the pool's lock
            await self._wait_for_one(until)

    async def _wait_for_one(self, until: float) -> None:
        """Until a connection is released, or `until` (event-loop time) has passed."""
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        self._waiters.append(waiter)
        woken = False
        try:
            async with asyncio.timeout_at(until):
                await waiter
            woken = True
        except TimeoutError:
            raise RedisConnectionError(
                f"no Redis connection free within {self.wait_s:g} s "
                f"(all {self.max_connections} in use)"
            ) from None
        finally:
            if not waiter.done():
                waiter.cancel()
            elif not woken and not waiter.cancelled():
                self._wake_one()  # woken, but leaving (timed out, cancelled): the next one's turn

    async def release(self, connection: Any) -> None:
        await super().release(connection)
        self._wake_one()

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                break


def waiting_client(
    url: str, max_connections: int, wait_s: float, **connection: Any
) -> aioredis.Redis:
    """A client of at most `max_connections` connections to `url`, a command waiting up to
    `wait_s` for one: a call its caller gave up on, left to finish in the background, must
    not queue for a connection for ever behind a Redis that stopped answering. `connection`:
    redis-py's per-connection options (timeouts, retry). Raises ValueError for a URL redis-py
    rejects."""
    pool = WaitingPool.from_url(url, wait_s=wait_s, max_connections=max_connections, **connection)
    return aioredis.Redis.from_pool(pool)
