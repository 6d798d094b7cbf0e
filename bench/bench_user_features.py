"""What user-cluster features cost per request: in-process table, Redis, and Redis faults.

`python -m bench.bench_user_features` → bench/results/user_features.md

Side by side in one run, one asyncio loop, our own redis-server on a free port:
- a bare redis.asyncio HGET round trip (the floor for anything that asks Redis);
- `UserFeatureResolver.resolve` with no Redis (the embedded default), with Redis and the TTL
  cache warm, with the cache off (override GET + embedding HGET: two round trips);
- with Redis paused (SIGSTOP): first the deadline-bound timeouts (beside a bare
  asyncio.timeout on a sleep: what the loop itself overshoots), then the open breaker.
"""

from __future__ import annotations

import asyncio
import contextlib
import platform
import statistics
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import numpy as np
import redis.asyncio as aioredis

from app.features.user_features import UserFeatureResolver, UserFeatures
from app.settings import Settings
from tests.app.features.conftest import CLUSTERS, DIM, make_files, make_manifest
from tests.support.redis_server import RedisServer, redis_binary
from trainer.redis_publish import push_embeddings

OUT = Path(__file__).parent / "results" / "user_features.md"
USER = {"id": "u1", "profile": {"country": "US", "price": 2}}
N = 2000


async def _time(n: int, call: Callable[[], Awaitable[object]]) -> tuple[list[float], str]:
    """Microseconds per call, and how the answers were marked (degraded reasons counted)."""
    for _ in range(min(n // 10, 100)):
        await call()
    out = []
    marks: Counter[str] = Counter()
    for _ in range(n):
        t0 = time.perf_counter()
        got = await call()
        out.append((time.perf_counter() - t0) * 1e6)
        if isinstance(got, UserFeatures):
            marks.update(got.reasons if got.degraded else ["ok"])
    return out, ", ".join(f"{k} {v}" for k, v in marks.most_common())


def _row(name: str, timed: tuple[list[float], str], base: float) -> str:
    us, marks = timed
    p50 = statistics.median(us)
    p99 = float(np.percentile(us, 99))
    return f"| {name} | {p50:.1f} | {p99:.1f} | {p50 / base:.2f} | {marks or '-'} |"


async def _resolver(settings: Settings) -> UserFeatureResolver:
    resolver = UserFeatureResolver(settings, metrics=object())
    resolver.register_model(make_manifest(), make_files())
    await resolver.start()
    return resolver


async def main(server: RedisServer) -> list[str]:
    manifest = make_manifest()
    push_embeddings(server.url, "ltr:", manifest, CLUSTERS, np.ones((len(CLUSTERS), DIM)))
    rows: list[tuple[str, tuple[list[float], str]]] = []

    client = aioredis.Redis.from_url(server.url)
    rows.append(
        ("bare redis.asyncio HGET", await _time(N, lambda: client.hget("ltr:emb:m:v1", "US")))
    )
    await client.aclose()

    local = await _resolver(Settings(redis_url=None))
    rows.append(("resolve, in-process only", await _time(N, lambda: local.resolve(manifest, USER))))
    cached = await _resolver(Settings(redis_url=server.url))
    rows.append(
        ("resolve, Redis, cache warm", await _time(N, lambda: cached.resolve(manifest, USER)))
    )
    cold = await _resolver(Settings(redis_url=server.url, redis_cache_ttl_seconds=0))
    rows.append(("resolve, Redis, cache off", await _time(N, lambda: cold.resolve(manifest, USER))))

    async def bare_timeout() -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.010):
                await asyncio.sleep(1)

    rows.append(("bare asyncio.timeout(10 ms) on a sleep", await _time(50, bare_timeout)))
    paused = await _resolver(
        Settings(redis_url=server.url, redis_cache_ttl_seconds=0, breaker_failure_threshold=10**6)
    )
    server.pause()
    try:
        rows.append(
            (
                "resolve, Redis paused (10 ms deadline)",
                await _time(50, lambda: paused.resolve(manifest, USER)),
            )
        )
        opened = await _resolver(Settings(redis_url=server.url, redis_cache_ttl_seconds=0))
        for _ in range(10):
            await opened.resolve(manifest, USER)
        assert opened.store.breaker.state == "open"
        rows.append(
            ("resolve, breaker open", await _time(N, lambda: opened.resolve(manifest, USER)))
        )
    finally:
        server.resume()
    for r in (local, cached, cold, paused, opened):
        await r.close()
    base = statistics.median(rows[0][1][0])
    return [_row(name, us, base) for name, us in rows]


def run() -> None:
    server = RedisServer(redis_binary()).start()
    try:
        table = asyncio.run(main(server))
    finally:
        server.stop()
    text = "\n".join(
        [
            "# User-cluster features: cost per request",
            "",
            f"`python -m bench.bench_user_features`; {platform.processor() or platform.machine()},",
            "2 cores shared with other engineers while measured (noisy: read the ratios).",
            "One asyncio loop, redis-server on loopback, timings in microseconds per call",
            "(ratio = p50 / bare HGET p50). Default settings: 10 ms deadline, 30 s cache TTL.",
            "",
            "| what | p50 µs | p99 µs | x bare HGET | answers |",
            "| --- | ---: | ---: | ---: | --- |",
            *table,
            "",
        ]
    )
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(text)
    print(text)


if __name__ == "__main__":
    run()
