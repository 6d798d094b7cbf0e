from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any, TypeVar

import numpy as np
import pytest
import redis

from app.artifacts.manifest import Manifest
from app.features.user_features import VERSIONS_KEPT, UserFeatureResolver, UserFeatures
from app.settings import Settings
from tests.app.features.conftest import CLUSTERS, DIM, make_files, make_manifest, table_vectors
from tests.support.manual_clock import ManualClock
from tests.support.redis_server import RedisServer, free_port, redis_binary
from trainer.redis_publish import push_embeddings

T = TypeVar("T")
PREFIX = "t:"
US_USER = {"id": "u1", "profile": {"country": "US", "price": 2}}  # US_pn1 → "US" (row 1)


class Counter:
    def __init__(self) -> None:
        self.value = 0

    def inc(self) -> None:
        self.value += 1


def _settings(url: str | None, **kw: Any) -> Settings:
    base: dict[str, Any] = {"redis_prefix": PREFIX, "redis_deadline_ms": 200.0}
    return Settings(redis_url=url, **(base | kw))


def _bytes_sent(redis_server: RedisServer, run: Callable[[], T]) -> tuple[T, int]:
    """What `run` returns and how many bytes Redis sent its clients meanwhile."""
    with redis.Redis.from_url(redis_server.url) as client:
        before = client.info("stats")["total_net_output_bytes"]
        result = run()
        return result, client.info("stats")["total_net_output_bytes"] - before


def _with_resolver(
    settings: Settings,
    manifest: Manifest,
    body: Callable[[UserFeatureResolver], Awaitable[T]],
    metrics: object | None = None,
    clock: ManualClock | None = None,
) -> T:
    async def scenario() -> T:
        if clock is None:
            resolver = UserFeatureResolver(settings, metrics)
        else:
            resolver = UserFeatureResolver(settings, metrics, clock)
        resolver.register_model(manifest, make_files())
        await resolver.start()
        try:
            return await body(resolver)
        finally:
            await resolver.close()

    return asyncio.run(scenario())


def _remote_vectors() -> np.ndarray:
    """Redis rows differ from the artifact's (row i is 10 + i there, i here)."""
    return np.repeat(10.0 + np.arange(len(CLUSTERS), dtype=np.float32)[:, None], DIM, axis=1)


def _push(server: RedisServer, manifest: Manifest) -> None:
    push_embeddings(server.url, PREFIX, manifest, CLUSTERS, _remote_vectors())


def _resolve_one(settings: Settings, manifest: Manifest, user: Any) -> UserFeatures:
    return _with_resolver(settings, manifest, lambda r: r.resolve(manifest, user))


# --- in-process store (no Redis URL: the embedded default) ---------------------------------


@pytest.mark.parametrize(
    ("user", "cluster", "row", "reasons"),
    [
        (US_USER, "US", 1, []),
        ({"profile": {"country": "US", "price": 0.5}}, "US_pn0", 2, []),
        ({"id": "u9", "profile": {"country": "FR", "price": 7}}, "FR_pn2", 4, []),
        ({"profile": {"country": "DE", "price": 2}}, "unknown", 0, ["unknown_cluster"]),
        ({"profile": {"country": "US", "price": 10**400}}, "US", 1, []),
        (None, "unknown", 0, ["no_user"]),
        ({"id": "u1"}, "unknown", 0, ["no_user"]),
        ({"id": 5, "profile": "junk"}, "unknown", 0, ["no_user"]),
        # An empty profile is one with every field missing (other_px, which this table
        # lacks), as training reads a user whose fields are all null: it was "no user".
        ({"id": "zz", "profile": {}}, "unknown", 0, ["unknown_cluster"]),
        (
            {"id": "zz", "profile": {"country": None, "price": None}},
            "unknown",
            0,
            ["unknown_cluster"],
        ),
    ],
)
def test_in_process_store(
    manifest: Manifest, user: Any, cluster: str, row: int, reasons: list[str]
) -> None:
    got = _resolve_one(_settings(None), manifest, user)
    assert (got.cluster, got.degraded, got.reasons) == (cluster, False, reasons)
    assert got.vector is not None and got.vector.dtype == np.float32
    np.testing.assert_array_equal(got.vector, np.full(DIM, row, np.float32))


def test_model_without_clusters(manifest: Manifest) -> None:
    plain = manifest.model_copy(update={"user_clusters": None})
    got = _resolve_one(_settings(None), plain, US_USER)
    assert got == UserFeatures(None, None, False, [])


def test_tables_are_kept_least_recently_used_first_out(manifest: Manifest) -> None:
    resolver = UserFeatureResolver(_settings(None))
    resolver.register_model(manifest, make_files())
    newer = [make_manifest(version=f"v{i}") for i in range(2, VERSIONS_KEPT + 2)]
    for i, m in enumerate(newer):
        resolver.register_model(m, make_files())
        if i < len(newer) - 1:
            assert resolver.table(manifest) is not None  # serving traffic keeps it
    assert resolver.table(manifest) is not None
    assert resolver.table(newer[0]) is None  # the least recently used one went
    again = make_manifest(version="v3")  # the same version loaded once more: newer table
    resolver.register_model(again, make_files(vectors=table_vectors() + 5))
    table = resolver.table(newer[1])
    assert table is not None and table.vectors[0, 0] == 5.0

    got = asyncio.run(resolver.resolve(newer[0], US_USER))
    assert got.degraded and got.reasons == ["embedding_table_missing"]
    assert got.vector is not None and got.vector.shape == (DIM,)


def test_bad_table_is_refused_with_a_message(manifest: Manifest) -> None:
    resolver = UserFeatureResolver(_settings(None))
    with pytest.raises(ValueError, match="no row for the unknown cluster"):
        resolver.register_model(manifest, make_files(clusters=["a", "b", "c", "d", "e"]))


# --- against a real redis-server -----------------------------------------------------------


def test_vector_comes_from_redis(redis_server: RedisServer, manifest: Manifest) -> None:
    _push(redis_server, manifest)
    metrics = SimpleNamespace(REDIS_HITS=Counter(), REDIS_MISSES=Counter(), REDIS_ERRORS=Counter())
    got = _with_resolver(
        _settings(redis_server.url), manifest, lambda r: r.resolve(manifest, US_USER), metrics
    )
    assert (got.cluster, got.degraded, got.reasons) == ("US", False, [])
    np.testing.assert_array_equal(got.vector, np.full(DIM, 11.0, np.float32))
    # u1 has no override key (a miss), the embedding is a hit.
    assert (metrics.REDIS_HITS.value, metrics.REDIS_MISSES.value) == (1, 1)
    assert metrics.REDIS_ERRORS.value == 0


@pytest.mark.parametrize(
    ("override", "cluster", "reasons"),
    [("FR_pn2", "FR_pn2", []), ("FR_pn1", "FR", []), ("XX_1", "unknown", ["unknown_cluster"])],
)
def test_user_override_key(
    redis_server: RedisServer, manifest: Manifest, override: str, cluster: str, reasons: list[str]
) -> None:
    _push(redis_server, manifest)
    with redis.Redis.from_url(redis_server.url) as client:
        client.set(f"{PREFIX}user:u1", override)
    got = _resolve_one(_settings(redis_server.url), manifest, US_USER)
    assert (got.cluster, got.degraded, got.reasons) == (cluster, False, reasons)
    row = CLUSTERS.index(cluster)
    np.testing.assert_array_equal(got.vector, np.full(DIM, 10.0 + row, np.float32))


def test_missing_or_malformed_embedding_falls_back_to_the_artifact(
    redis_server: RedisServer, manifest: Manifest
) -> None:
    settings = _settings(redis_server.url)
    got = _resolve_one(settings, manifest, US_USER)
    assert (got.degraded, got.reasons) == (True, ["embedding_missing_in_redis"])
    np.testing.assert_array_equal(got.vector, np.full(DIM, 1.0, np.float32))

    with redis.Redis.from_url(redis_server.url) as client:
        client.hset(f"{PREFIX}emb:m:v1", "US", b"\x00\x00\x80\x3f")  # one float, not three
        client.hset(f"{PREFIX}user:u2", "a", "b")  # wrong type for an override
    got = _resolve_one(settings, manifest, US_USER)
    assert (got.degraded, got.reasons) == (True, ["embedding_malformed_in_redis"])
    np.testing.assert_array_equal(got.vector, np.full(DIM, 1.0, np.float32))
    got = _resolve_one(settings, manifest, {"id": "u2", "profile": US_USER["profile"]})
    # Redis answered: the embedding is still read (and found malformed).
    assert (got.degraded, got.reasons) == (
        True,
        ["redis_bad_value", "embedding_malformed_in_redis"],
    )


def test_cache_serves_until_the_ttl_expires(redis_server: RedisServer, manifest: Manifest) -> None:
    _push(redis_server, manifest)
    settings = _settings(redis_server.url, redis_cache_ttl_seconds=0.3)
    clock = ManualClock()

    async def body(resolver: UserFeatureResolver) -> list[UserFeatures]:
        first = await resolver.resolve(manifest, US_USER)
        with redis.Redis.from_url(redis_server.url) as client:
            client.set(f"{PREFIX}user:u1", "FR")
            client.hset(f"{PREFIX}emb:m:v1", "US", np.full(DIM, 99, "<f4").tobytes())
        clock.advance(0.29)
        cached = await resolver.resolve(manifest, US_USER)
        clock.advance(0.02)
        fresh = await resolver.resolve(manifest, US_USER)
        return [first, cached, fresh]

    first, cached, fresh = _with_resolver(settings, manifest, body, clock=clock)
    assert first.cluster == cached.cluster == "US"
    np.testing.assert_array_equal(cached.vector, first.vector)
    assert fresh.cluster == "FR" and not fresh.degraded
    np.testing.assert_array_equal(fresh.vector, np.full(DIM, 13.0, np.float32))


def test_breaker_opens_skips_redis_then_recovers(
    redis_server: RedisServer, manifest: Manifest
) -> None:
    settings = _settings(
        redis_server.url,
        redis_cache_ttl_seconds=0,
        breaker_failure_threshold=3,
        breaker_reset_seconds=0.5,
    )
    anonymous = {"profile": US_USER["profile"]}  # one Redis call per request
    clock = ManualClock()

    async def body(resolver: UserFeatureResolver) -> None:
        _push(redis_server, manifest)
        assert not (await resolver.resolve(manifest, anonymous)).degraded
        redis_server.kill()
        for _ in range(3):
            got = await resolver.resolve(manifest, anonymous)
            assert got.reasons == ["redis_unavailable"] and got.degraded
            np.testing.assert_array_equal(got.vector, np.full(DIM, 1.0, np.float32))
        redis_server.start()
        _push(redis_server, manifest)
        with redis.Redis.from_url(redis_server.url) as client:
            before = client.info("stats")["total_connections_received"]
        for _ in range(5):
            got = await resolver.resolve(manifest, anonymous)
            assert got.reasons == ["circuit_open"] and got.degraded
        with redis.Redis.from_url(redis_server.url) as client:
            # Only our own two INFO connections: the open breaker made no call at all.
            assert client.info("stats")["total_connections_received"] == before + 1
        clock.advance(0.45)
        got = await resolver.resolve(manifest, anonymous)
        assert got.reasons == ["circuit_open"]
        clock.advance(0.1)
        got = await resolver.resolve(manifest, anonymous)  # the half-open probe succeeds
        assert (got.degraded, got.reasons) == (False, [])
        np.testing.assert_array_equal(got.vector, np.full(DIM, 11.0, np.float32))
        assert resolver.store.breaker.state == "closed"

    _with_resolver(settings, manifest, body, clock=clock)


@pytest.mark.usefixtures("no_gc_pauses")
def test_paused_redis_never_holds_a_request_past_the_deadline(
    redis_server: RedisServer, manifest: Manifest
) -> None:
    deadline_ms = 30.0
    settings = _settings(
        redis_server.url,
        redis_deadline_ms=deadline_ms,
        redis_cache_ttl_seconds=0,
        breaker_failure_threshold=1000,  # keep calling the paused server
    )
    _push(redis_server, manifest)

    async def timed(resolver: UserFeatureResolver, user: Any) -> tuple[float, UserFeatures]:
        t0 = time.perf_counter()
        got = await resolver.resolve(manifest, user)
        return time.perf_counter() - t0, got

    async def body(resolver: UserFeatureResolver) -> list[tuple[float, UserFeatures]]:
        assert not (await resolver.resolve(manifest, US_USER)).degraded
        redis_server.pause()
        try:
            # Override + embedding lookups share one deadline; 20 requests at once.
            return list(await asyncio.gather(*(timed(resolver, US_USER) for _ in range(20))))
        finally:
            redis_server.resume()

    results = _with_resolver(settings, manifest, body)
    slowest = max(elapsed for elapsed, _ in results)
    # Slack for a shared 2-core machine; without the deadline this would wait until resume.
    assert slowest < (deadline_ms + 100.0) / 1000.0, f"slowest {slowest * 1000:.1f} ms"
    for _, got in results:
        assert got.degraded and got.reasons == ["redis_timeout"] and got.cluster == "US"
        np.testing.assert_array_equal(got.vector, np.full(DIM, 1.0, np.float32))


def test_start_with_redis_down_then_it_comes_up(manifest: Manifest) -> None:
    port = free_port()
    settings = _settings(
        f"redis://127.0.0.1:{port}/0", redis_cache_ttl_seconds=0, breaker_reset_seconds=0.2
    )
    clock = ManualClock()

    async def body(resolver: UserFeatureResolver) -> tuple[UserFeatures, UserFeatures]:
        down = await resolver.resolve(manifest, US_USER)
        server = RedisServer(redis_binary(), port=port).start()
        try:
            _push(server, manifest)
            clock.advance(0.25)
            up = await resolver.resolve(manifest, US_USER)
        finally:
            server.stop()
        return down, up

    down, up = _with_resolver(settings, manifest, body, clock=clock)
    assert down.degraded and down.reasons == ["redis_unavailable"]
    assert (up.degraded, up.reasons, up.cluster) == (False, [], "US")
    np.testing.assert_array_equal(up.vector, np.full(DIM, 11.0, np.float32))


def test_an_oversized_override_is_refused_before_it_is_parsed(
    redis_server: RedisServer, manifest: Manifest
) -> None:
    _push(redis_server, manifest)
    with redis.Redis.from_url(redis_server.url) as client:
        client.set(f"{PREFIX}user:u1", "_" * 40_000)  # written by someone else: any size
    start = time.perf_counter()
    got = _resolve_one(_settings(redis_server.url), manifest, US_USER)
    assert time.perf_counter() - start < 1.0
    # The profile's cluster is used instead, and the bad value is reported.
    assert (got.cluster, got.degraded, got.reasons) == ("US", True, ["redis_bad_value"])


def test_a_huge_embedding_field_is_refused_without_being_read(
    redis_server: RedisServer, manifest: Manifest
) -> None:
    settings = _settings(redis_server.url, redis_cache_ttl_seconds=0, breaker_failure_threshold=1)
    with redis.Redis.from_url(redis_server.url) as client:
        client.hset(f"{PREFIX}emb:m:v1", "US", b"\x00" * 50_000_000)
        client.hset(f"{PREFIX}emb:m:v1", "FR", b"\x00" * (4 * DIM + 1))  # one byte over

    async def body(resolver: UserFeatureResolver) -> list[UserFeatures]:
        got = [await resolver.resolve(manifest, US_USER) for _ in range(3)]
        got.append(await resolver.resolve(manifest, {"profile": {"country": "FR", "price": 2}}))
        assert resolver.store.breaker.state == "closed"
        return got

    got, sent = _bytes_sent(redis_server, lambda: _with_resolver(settings, manifest, body))
    assert sent < 100_000, f"{sent} bytes sent: the 50 MB field was read"
    for one in got:
        assert (one.degraded, one.reasons) == (True, ["redis_bad_value"])
    np.testing.assert_array_equal(got[0].vector, np.full(DIM, 1.0, np.float32))  # the artifact's


@pytest.mark.parametrize("value", [3e38, 1e30, -1e30, 64.5, float("nan"), float("inf")])
def test_an_embedding_beyond_what_training_produced_is_malformed(
    redis_server: RedisServer, manifest: Manifest, value: float
) -> None:
    # The table's largest value is 4 (row i is all i): Redis rows may reach 16 x 4 = 64.
    remote = np.array([1.0, value, 1.0], dtype="<f4")
    with redis.Redis.from_url(redis_server.url) as client:
        client.hset(f"{PREFIX}emb:m:v1", "US", remote.tobytes())
    got = _resolve_one(_settings(redis_server.url), manifest, US_USER)
    assert (got.degraded, got.reasons) == (True, ["embedding_malformed_in_redis"])
    np.testing.assert_array_equal(got.vector, np.full(DIM, 1.0, np.float32))  # the artifact's


def test_an_embedding_within_the_bound_is_used(
    redis_server: RedisServer, manifest: Manifest
) -> None:
    remote = np.array([-64.0, 64.0, 0.5], dtype="<f4")
    with redis.Redis.from_url(redis_server.url) as client:
        client.hset(f"{PREFIX}emb:m:v1", "US", remote.tobytes())
    got = _resolve_one(_settings(redis_server.url), manifest, US_USER)
    assert (got.degraded, got.reasons) == (False, [])
    np.testing.assert_array_equal(got.vector, remote)


def test_a_huge_override_is_read_bounded_and_spares_the_breaker(
    redis_server: RedisServer, manifest: Manifest
) -> None:
    _push(redis_server, manifest)
    settings = _settings(redis_server.url, redis_cache_ttl_seconds=0, breaker_failure_threshold=1)
    with redis.Redis.from_url(redis_server.url) as client:
        client.set(f"{PREFIX}user:u1", b"F" * 50_000_000)
        client.set(f"{PREFIX}user:u2", "FR" + " " * 254)  # 256 bytes: the longest allowed
        client.set(f"{PREFIX}user:u3", "FR" + " " * 255)  # 257 bytes
        client.set(f"{PREFIX}user:u4", "")  # empty: no override, like an absent key

    async def body(resolver: UserFeatureResolver) -> list[UserFeatures]:
        got = [await resolver.resolve(manifest, US_USER) for _ in range(5)]
        for uid in ("u2", "u3", "u4"):
            got.append(await resolver.resolve(manifest, {**US_USER, "id": uid}))
        assert resolver.store.breaker.state == "closed"
        return got

    got, sent = _bytes_sent(redis_server, lambda: _with_resolver(settings, manifest, body))
    assert sent < 100_000, f"{sent} bytes sent: the 50 MB value was read"
    for huge in got[:5]:
        assert (huge.cluster, huge.degraded, huge.reasons) == ("US", True, ["redis_bad_value"])
        np.testing.assert_array_equal(huge.vector, np.full(DIM, 11.0, np.float32))
    longest, too_long, empty = got[5:]
    assert (longest.cluster, longest.degraded) == ("FR", False)
    assert (too_long.cluster, too_long.reasons) == ("US", ["redis_bad_value"])
    assert (empty.cluster, empty.degraded, empty.reasons) == ("US", False, [])


def test_missing_embeddings_are_logged_when_they_go_and_when_they_are_back(
    redis_server: RedisServer, manifest: Manifest, caplog: pytest.LogCaptureFixture
) -> None:
    """Every answer was degraded (embedding_missing_in_redis) after a Redis restart without
    persistence, and the log said nothing."""
    caplog.set_level(logging.INFO, "app.features.redis_store")
    settings = _settings(redis_server.url, redis_cache_ttl_seconds=0.001)

    async def body(resolver: UserFeatureResolver) -> list[list[str]]:
        reasons = []
        for _ in range(3):
            reasons.append((await resolver.resolve(manifest, US_USER)).reasons)
            await asyncio.sleep(0.002)
        _push(redis_server, manifest)
        for _ in range(3):
            reasons.append((await resolver.resolve(manifest, US_USER)).reasons)
            await asyncio.sleep(0.002)
        return reasons

    reasons = _with_resolver(settings, manifest, body)
    assert reasons == [["embedding_missing_in_redis"]] * 3 + [[]] * 3
    logged = [r.getMessage() for r in caplog.records if r.name == "app.features.redis_store"]
    assert len(logged) == 2, logged
    assert logged[0].startswith("user embeddings of m/v1 are missing in Redis ('t:emb:m:v1'")
    assert "ltr redis restore" in logged[0]
    assert logged[1].startswith("embeddings of m/v1 are in Redis again after")


def test_an_embedding_still_cached_is_not_taken_for_redis_having_them_again(
    redis_server: RedisServer, manifest: Manifest, caplog: pytest.LogCaptureFixture
) -> None:
    """After Redis restarted empty, users of a cluster still in the service's cache alternated
    with users of another: 52 "missing" / "in Redis again after 0 s" pairs in 10 s, while the
    embeddings came back only with `ltr redis restore`."""
    caplog.set_level(logging.INFO, "app.features.redis_store")
    settings = _settings(redis_server.url, redis_cache_ttl_seconds=60.0)
    other_user = {"id": "u2", "profile": {"country": "FR"}}

    async def body(resolver: UserFeatureResolver) -> list[list[str]]:
        _push(redis_server, manifest)
        await resolver.resolve(manifest, US_USER)  # the US embedding is cached
        with redis.Redis.from_url(redis_server.url) as client:
            client.flushall()
        reasons = []
        for _ in range(4):
            for user in (US_USER, other_user):
                reasons.append((await resolver.resolve(manifest, user)).reasons)
        return reasons

    reasons = _with_resolver(settings, manifest, body)
    assert reasons == [[], ["embedding_missing_in_redis"]] * 4
    logged = [r.getMessage() for r in caplog.records if r.name == "app.features.redis_store"]
    assert len(logged) == 1 and "are missing in Redis" in logged[0], logged
