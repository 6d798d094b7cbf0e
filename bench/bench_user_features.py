"""User features: what they buy in ranking quality, what they cost per request.

`python -m bench.bench_user_features [--part quality|serving|resolver|render]`
→ bench/results/user_features.md (figures in bench/results/user_features/*.json)

Quality (`--part quality`, bench.user_features_quality): test NDCG@10 of the models of issue 18's
table on `ltr simulate` data and on bench.generate_personal (tastes set by combinations of
profile fields), both field orders of the cluster scheme, 3 seeds. Serving (`--part serving`):
p50 of POST /rerank with 300 candidates on the real service (uvicorn), user features on vs off,
same engine, requests alternating. Resolver (`--part resolver`):

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
import json
import os
import platform
import statistics
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import redis.asyncio as aioredis

from app.artifacts.manifest import Manifest
from app.features.user_features import UserFeatureResolver, UserFeatures
from app.settings import Settings
from tests.app.features.conftest import CLUSTERS, DIM, make_files, make_manifest
from tests.support.redis_server import RedisServer, redis_binary
from trainer.redis_publish import push_embeddings

OUT = Path(__file__).parent / "results" / "user_features.md"
FIGURES = Path(__file__).parent / "results" / "user_features"
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


def _combination_model() -> tuple[Manifest, dict[str, bytes], dict[str, Any]]:
    """A DNN-style table over bench.generate_personal's four fields with every field row and
    every hashed combination row (4 field + 10 combination rows added per request: the most
    this scheme can add), and a user whose full cluster id is in the table."""
    import tomllib

    from app.artifacts.manifest import ClusterScheme
    from app.features.clusters import cluster_id
    from app.features.embedding_table import field_keys
    from app.features.field_combinations import combination_buckets, combination_row_key
    from bench.generate_personal import ORDERS, scheme_toml

    scheme = ClusterScheme.model_validate(tomllib.loads(scheme_toml(ORDERS["cdpa"])))
    profile = {"country": "US", "device": "mobile", "price_level": 3, "age": 41}
    full = cluster_id(scheme, profile)
    fields = field_keys(scheme, full)
    buckets = sorted(set(combination_buckets(fields, 3, 65536)))
    keys = ["unknown", full.split("_")[0], full, *fields, *map(combination_row_key, buckets)]
    manifest = make_manifest(dim=32)
    assert manifest.user_clusters is not None
    uc = manifest.user_clusters.model_copy(
        update={"scheme": scheme, "field_embeddings": True, "combination_buckets": 65536}
    )
    vectors = np.random.default_rng(0).normal(size=(len(keys), 32)).astype(np.float32)
    manifest = manifest.model_copy(update={"user_clusters": uc})
    return manifest, make_files(keys, vectors), {"id": "u1", "profile": profile}


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
    combo_manifest, combo_files, combo_user = _combination_model()
    combos = UserFeatureResolver(Settings(redis_url=None), metrics=object())
    combos.register_model(combo_manifest, combo_files)
    await combos.start()
    rows.append(
        (
            "resolve, in-process, + 4 field and 10 combination rows",
            await _time(N, lambda: combos.resolve(combo_manifest, combo_user)),
        )
    )
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
    for r in (local, combos, cached, cold, paused, opened):
        await r.close()
    base = statistics.median(rows[0][1][0])
    return [_row(name, us, base) for name, us in rows]


def resolver_rows() -> list[str]:
    server = RedisServer(redis_binary()).start()
    try:
        return asyncio.run(main(server))
    finally:
        server.stop()


def run() -> None:
    import argparse

    from bench import user_features_quality as uq
    from bench.user_features_report import render

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--part", choices=["all", "quality", "serving", "resolver", "render"], default="all"
    )
    parser.add_argument("--generator", choices=["both", *uq.GENERATORS], default="both")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rows", type=int, default=uq.DEFAULT_ROWS)
    parser.add_argument("--users", type=int, default=uq.DEFAULT_USERS)
    parser.add_argument(
        "--models",
        help="comma-separated quality rows to measure (e.g. dnn_user_A,dnn_user_B); the other "
        "rows' figures are carried over from the existing quality_<generator>.json",
    )
    parser.add_argument(
        "--label",
        help="quality figures of other --rows/--users go to quality_<generator>-<label>.json "
        "(their own section), the models to their own work directory",
    )
    args = parser.parse_args()
    only = None if args.models is None else frozenset(args.models.split(","))
    unknown = set(only or ()) - {key for key, _ in uq.ROWS}
    if unknown:
        parser.error(f"unknown --models {sorted(unknown)}")
    FIGURES.mkdir(parents=True, exist_ok=True)
    if args.part in ("all", "quality"):
        generators = uq.GENERATORS if args.generator == "both" else (args.generator,)
        for generator in generators:
            suffix = f"-{args.label}" if args.label else ""
            path = FIGURES / f"quality_{generator}{suffix}.json"
            previous = json.loads(path.read_text()) if only and path.exists() else None
            work = uq.WORK / args.label if args.label else uq.WORK
            figures = uq.quality(generator, args.seeds, args.rows, args.users, only, previous, work)
            path.write_text(json.dumps(figures, indent=1))
    if args.part in ("all", "serving"):
        serving = uq.serving(args.rows, args.users)
        (FIGURES / "serving.json").write_text(json.dumps(serving, indent=1))
    if args.part in ("all", "resolver"):
        before = os.getloadavg()[0]
        rows = resolver_rows()
        loads = {"load_average_before": before, "load_average_after": os.getloadavg()[0]}
        (FIGURES / "resolver.json").write_text(json.dumps({"rows": rows, **loads}, indent=1))
    text = render(FIGURES, platform.processor() or platform.machine())
    OUT.write_text(text)
    print(text)


if __name__ == "__main__":
    run()
