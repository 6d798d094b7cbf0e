from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import redis

from app.impressions.feedback import (
    RECORD_GRACE_S,
    FeedbackError,
    FeedbackUnavailable,
    ImpressionLog,
    UnknownRequest,
)
from tests.app.impressions.conftest import answer, dropped, features, jsonl_settings, settings
from tests.support.redis_server import RedisServer, free_port


def click(cid: object, kind: str = "click") -> dict[str, object]:
    return {"id": cid, "type": kind, "value": None}


def test_logs_served_order_and_counts_feedback_once(tmp_path: Path) -> None:
    config = jsonl_settings(tmp_path)

    async def go() -> list[tuple[int, int]]:
        log = ImpressionLog(config)
        await log.start()
        # Input order a, b, c; served c, a (top_k 2): b was never shown.
        log.log_rerank(
            answer("r1", ["a", "b", "c"], [2, 0]), "q1", "u1", "US", ["a", "b", "c"], features(3)
        )
        out = [
            await log.record_feedback("r1", [click("c"), click("c", "purchase")]),
            await log.record_feedback("r1", [click("c"), click("a"), click("a")]),
        ]
        await log.close()
        return out

    assert asyncio.run(go()) == [(2, 0), (1, 2)]
    records = [orjson.loads(line) for line in config.impressions_jsonl.read_bytes().splitlines()]
    impression = records[0]
    assert impression["ids"] == ["c", "a"] and impression["positions"] == [1, 2]
    assert (impression["query_id"], impression["user_id"], impression["user_cluster"]) == (
        "q1",
        "u1",
        "US",
    )
    assert [e["id"] for r in records[1:] for e in r["events"]] == ["c", "c", "a"]


def test_feedback_errors(tmp_path: Path) -> None:
    async def go() -> None:
        log = ImpressionLog(jsonl_settings(tmp_path))
        log.log_rerank(answer("r1", ["a", "b"], [1]), None, None, None, ["a", "b"], features(2))
        with pytest.raises(UnknownRequest):
            await log.record_feedback("nope", [click("a")])
        with pytest.raises(FeedbackError, match=r'did not serve candidate "a"\Z'):
            await log.record_feedback("r1", [click("a")])  # a was cut by top_k
        with pytest.raises(FeedbackError, match=r'did not serve candidates "a", "z"\Z'):
            await log.record_feedback("r1", [click("a"), click("z")])
        with pytest.raises(FeedbackError, match=r'did not serve candidate "z"\Z'):  # once
            await log.record_feedback("r1", [click("z"), click("b"), click("z")])
        with pytest.raises(FeedbackUnavailable):
            await ImpressionLog(settings(impressions_enabled=False)).record_feedback("r1", [])

    asyncio.run(go())


def test_a_reused_request_id_takes_feedback_on_its_first_impression(tmp_path: Path) -> None:
    # `ltr dataset` keeps a request id's first impression: feedback must refer to that one.
    async def go() -> tuple[int, int]:
        log = ImpressionLog(jsonl_settings(tmp_path))
        log.log_rerank(answer("r", ["a", "b"], [0, 1]), None, None, None, ["a", "b"], features(2))
        log.log_rerank(answer("r", ["c"], [0]), None, None, None, ["c"], features(1))
        with pytest.raises(FeedbackError, match="did not serve candidate"):
            await log.record_feedback("r", [click("c")])
        return await log.record_feedback("r", [click("a")])

    assert asyncio.run(go()) == (1, 0)


def test_another_replica_sees_a_reused_request_ids_first_impression(
    redis_server: RedisServer,
) -> None:
    config = settings(redis_url=redis_server.url)

    async def go() -> None:
        serving, other = ImpressionLog(config), ImpressionLog(config)
        serving.log_rerank(answer("r", ["a"], [0]), None, None, None, ["a"], features(1))
        serving.log_rerank(answer("r", ["c"], [0]), None, None, None, ["c"], features(1))
        assert serving.sink is not None
        await serving.sink.flush()
        assert await other.record_feedback("r", [click("a")]) == (1, 0)
        with pytest.raises(FeedbackError):
            await other.record_feedback("r", [click("c")])
        await serving.close()
        await other.close()

    asyncio.run(go())


def test_a_request_id_reused_on_two_replicas_takes_feedback_on_the_first_everywhere(
    redis_server: RedisServer,
) -> None:
    """Two workers each served request id "r" (a, then c): each took feedback on what it had
    served itself, and `ltr dataset` later dropped the clicks on c, answered 202, as not
    served. Once the first impression is in Redis, both refer to it."""
    config = settings(redis_url=redis_server.url)

    async def go() -> None:
        first, second = ImpressionLog(config), ImpressionLog(config)
        first.log_rerank(answer("r", ["a"], [0]), None, None, None, ["a"], features(1))
        assert first.sink is not None and second.sink is not None
        await first.sink.flush()
        second.log_rerank(answer("r", ["c"], [0]), None, None, None, ["c"], features(1))
        await second.sink.flush()
        for log in (first, second):
            with pytest.raises(FeedbackError, match="did not serve candidate"):
                await log.record_feedback("r", [click("c")])
        assert await second.record_feedback("r", [click("a")]) == (1, 0)
        assert await first.record_feedback("r", [click("a")]) == (0, 1)
        await first.close()
        await second.close()

    asyncio.run(go())


def test_a_replica_takes_feedback_on_what_it_served_before_redis_has_it(
    redis_server: RedisServer,
) -> None:
    config = settings(redis_url=redis_server.url)

    async def go() -> tuple[int, int]:
        log = ImpressionLog(config)
        log.log_rerank(answer("q", ["a"], [0]), None, None, None, ["a"], features(1))
        accepted = await log.record_feedback("q", [click("a")])  # the record is still queued
        await log.close()
        return accepted

    assert asyncio.run(go()) == (1, 0)


def test_a_record_written_while_feedback_looks_for_it_is_not_called_lost(
    redis_server: RedisServer,
) -> None:
    """A trial: a click sent right after its answer got 404 "its impression was written to
    Redis and is no longer there" (12 of 3,000): the sink finished writing the record while
    the lookup was on its way, and the flag was read after the lookup."""
    config = settings(redis_url=redis_server.url)

    async def go() -> tuple[int, int]:
        log = ImpressionLog(config)
        log.log_rerank(answer("q", ["a"], [0]), None, None, None, ["a"], features(1))
        assert log.redis is not None
        real_get = log.redis.get

        async def get_as_the_write_lands(key: str) -> object:
            found = await real_get(key)  # Redis answers: not there yet
            log._batch_done([{"kind": "impression", "request_id": "q"}], True)
            return found

        log.redis.get = get_as_the_write_lands  # type: ignore[method-assign]
        accepted = await log.record_feedback("q", [click("a")])
        await log.close()
        return accepted

    assert asyncio.run(go()) == (1, 0)


def test_disabled_log_is_inert(tmp_path: Path) -> None:
    log = ImpressionLog(jsonl_settings(tmp_path, impressions_enabled=False))
    assert not log.enabled
    log.log_rerank(answer("r1", ["a"], [0]), None, None, None, ["a"], features(1))
    assert not (tmp_path / "log").exists()


def test_a_bad_answer_is_counted_not_raised(tmp_path: Path) -> None:
    log = ImpressionLog(jsonl_settings(tmp_path))
    before = dropped("impression", "encode_error")
    log.log_rerank({"request_id": "r"}, None, None, None, ["a"], features(1))  # no _order
    assert dropped("impression", "encode_error") == before + 1


@pytest.mark.parametrize("value", [b"5", b'[{"a":1}]', b"garbage{", b"[[1,2]]", b'"d1"'])
def test_an_unreadable_impression_in_redis_is_an_unknown_request(
    redis_server: RedisServer, value: bytes
) -> None:
    import redis

    redis.Redis.from_url(redis_server.url).set("ltr:imp:odd", value)

    async def go() -> None:
        log = ImpressionLog(settings(redis_url=redis_server.url))
        with pytest.raises(UnknownRequest, match="unreadable"):
            await log.record_feedback("odd", [click("d1")])
        await log.close()

    asyncio.run(go())


def test_another_replica_answers_from_redis(redis_server: RedisServer) -> None:
    config = settings(redis_url=redis_server.url)

    async def go() -> tuple[tuple[int, int], tuple[int, int]]:
        serving, other = ImpressionLog(config), ImpressionLog(config)
        serving.log_rerank(
            answer("r9", ["a", "b"], [1, 0]), None, None, None, ["a", "b"], features(2)
        )
        assert serving.sink is not None
        await serving.sink.flush()
        first = await other.record_feedback("r9", [click("b")])
        again = await serving.record_feedback("r9", [click("b"), click("a")])
        with pytest.raises(UnknownRequest):
            await other.record_feedback("r10", [click("a")])
        await serving.close()
        await other.close()
        return first, again

    # The second replica's click on b is seen by the first through the shared hash.
    assert asyncio.run(go()) == ((1, 0), (1, 1))


def test_redis_down_is_503_for_ids_known_here_too(tmp_path: Path) -> None:
    """Feedback on a request this replica served was accepted while Redis was down (before
    the sink had failed a write): its record then went to the same Redis and was dropped.
    Not acknowledged now, as docs/API.md says for an unreachable store."""
    config = settings(redis_url=f"redis://127.0.0.1:{free_port()}/0")

    async def go() -> None:
        log = ImpressionLog(config)
        log.log_rerank(answer("r1", ["a"], [0]), None, None, None, ["a"], features(1))
        with pytest.raises(FeedbackUnavailable):
            await log.record_feedback("elsewhere", [click("a")])
        with pytest.raises(FeedbackUnavailable):
            await log.record_feedback("r1", [click("a")])  # known here, but not recordable
        await log.close()

    asyncio.run(go())


def test_refusals_while_the_log_fails_are_logged_once_a_minute(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One warning per call before: 500 lines for 500 clicks during a Redis outage."""
    config = settings(redis_url=f"redis://127.0.0.1:{free_port()}/0")

    async def go() -> None:
        log = ImpressionLog(config)
        assert log.sink is not None
        log.sink.failing = "Error 111"  # as a failed write leaves it: each call checks again
        for _ in range(50):
            with pytest.raises(FeedbackUnavailable):
                await log.record_feedback("r1", [click("a")])
        await log.close()

    with caplog.at_level(logging.WARNING, logger="app.impressions.feedback"):
        asyncio.run(go())
    refused = [r for r in caplog.records if r.getMessage().startswith("feedback refused")]
    assert len(refused) == 1 and "the impression log fails" in refused[0].getMessage()


def test_a_paused_redis_is_named_in_the_503(redis_server: RedisServer) -> None:
    async def go() -> str:
        log = ImpressionLog(settings(redis_url=redis_server.url))
        redis_server.pause()
        try:
            with pytest.raises(FeedbackUnavailable) as raised:
                await log.record_feedback("elsewhere", [click("a")])
        finally:
            redis_server.resume()
        await log.close()
        return str(raised.value)

    assert asyncio.run(go()) == "impression store unavailable: TimeoutError"


def test_feedback_sent_at_once_to_another_replica_waits_for_the_record(
    redis_server: RedisServer,
) -> None:
    """An upgrade trial: /feedback sent right after /rerank to another replica was a 404 in
    4-15 % of calls (the serving replica writes its record with its sink's next batch)."""
    config = settings(redis_url=redis_server.url)

    async def go() -> tuple[int, int]:
        serving, other = ImpressionLog(config), ImpressionLog(config)
        serving.log_rerank(answer("r5", ["a"], [0]), None, None, None, ["a"], features(1))
        assert serving.sink is not None

        async def flush_later() -> None:
            await asyncio.sleep(RECORD_GRACE_S / 3)  # a sink behind a busy loop
            await serving.sink.flush()  # type: ignore[union-attr]

        flushing = asyncio.create_task(flush_later())
        accepted = await other.record_feedback("r5", [click("a")])
        await flushing
        await serving.close()
        await other.close()
        return accepted

    assert asyncio.run(go()) == (1, 0)


def test_an_id_no_replica_served_is_unknown_after_the_grace(redis_server: RedisServer) -> None:
    async def go() -> float:
        log = ImpressionLog(settings(redis_url=redis_server.url))
        started = asyncio.get_running_loop().time()
        with pytest.raises(UnknownRequest):
            await log.record_feedback("nobody-served-this", [click("a")])
        waited = asyncio.get_running_loop().time() - started
        await log.close()
        return waited

    assert RECORD_GRACE_S <= asyncio.run(go()) < RECORD_GRACE_S + 1.0


def test_the_served_ids_kept_for_feedback_are_bounded_in_bytes(tmp_path: Path) -> None:
    """Before: the last 50,000 requests whatever they held: 96 KB a request of 1,000 short ids
    (4.8 GB a worker), and a fuzz trial's 10,000 ids of 1 KB kept 10.5 MB each."""
    config = jsonl_settings(tmp_path, impressions_index_max_mb=1)
    ids = [f"doc-{j:04d}-" + "x" * 90 for j in range(1000)]  # ~100 KB of JSON a request

    async def go() -> tuple[int, int]:
        log = ImpressionLog(config)
        for r in range(30):
            log.log_rerank(
                answer(f"r{r}", ids, list(range(1000))), None, None, None, ids, features(1000)
            )
        with pytest.raises(UnknownRequest):  # the oldest made room for the newest
            await log.record_feedback("r0", [click(ids[0])])
        newest = await log.record_feedback("r29", [click(ids[5])])
        await log.close()
        return newest

    assert asyncio.run(go()) == (1, 0)


RSS_PROBE = """
import os, sys
import numpy as np, orjson
from pathlib import Path
from app.impressions.feedback import ImpressionLog
from app.settings import Settings

class Takes:  # a sink that takes every record (and keeps none)
    def submit(self, record, size=0):
        return True

def rss_mb():
    return int(open(f"/proc/{os.getpid()}/statm").read().split()[1]) * 4096 / 2**20

log = ImpressionLog(Settings(impressions_enabled=True, impressions_jsonl=Path(sys.argv[1]),
                             impressions_index_max_mb=16))
log.sink = Takes()
start = rss_mb()
for r in range(3000):  # a request's large transient buffers around each kept entry
    body = orjson.dumps({"candidates": [{"id": f"r{r}-{j}", "features": {"f1": 0.5}}
                                        for j in range(1000)]})
    ids = [c["id"] for c in orjson.loads(body)["candidates"]]
    rows = np.full((1000, 300), np.nan, np.float32)
    served = {"request_id": f"r{r}", "model": {"name": "m", "version": "v"},
              "_order": list(range(1000))}
    log.log_rerank(served, None, None, None, ids, rows)
print(round(rss_mb() - start))
"""


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads /proc")
def test_the_memory_the_served_ids_hold_is_the_setting_not_a_multiple(tmp_path: Path) -> None:
    """A re-check trial: small entries kept between each request's large transient buffers
    fragmented the heap, so 64 MB of ids held 1.6 GB (16 MB: +399 MB in this probe); one
    ring allocated once holds them now."""
    probe = subprocess.run(
        [sys.executable, "-c", RSS_PROBE, str(tmp_path / "log.jsonl")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert probe.returncode == 0, probe.stderr
    assert int(probe.stdout) < 16 + 60, probe.stdout  # the ring, and allocator slack


def test_lookups_beyond_the_pool_wait_and_leave_the_writes_their_connections(
    redis_server: RedisServer,
) -> None:
    """Before: /feedback's lookups and the sink's writes shared a pool that refused a command
    past 100 connections. A trial's 500 concurrent lookups of unknown ids answered 6,840 of
    7,142 with 503 "Too many connections", and impression batches failed the same way and were
    dropped. Here every lookup connection is taken: the impressions are still written, and a
    lookup waits for a connection instead of failing."""
    config = settings(redis_url=redis_server.url, redis_max_connections=3)
    before = dropped("impression", "sink_error")

    async def go() -> tuple[bool, BaseException | None]:
        log = ImpressionLog(config)
        assert log.redis is not None and log.sink is not None
        pool = log.redis.connection_pool
        held = [await pool.get_connection() for _ in range(pool.max_connections)]
        log.log_rerank(answer("r1", ["a"], [0]), None, None, None, ["a"], features(1))
        await log.sink.flush()
        waiting = asyncio.ensure_future(log.record_feedback("elsewhere", [click("a")]))
        await asyncio.sleep(0.2)
        was_waiting = not waiting.done()
        for conn in held:
            await pool.release(conn)
        failure = (await asyncio.gather(waiting, return_exceptions=True))[0]
        await log.close()
        return was_waiting, failure if isinstance(failure, BaseException) else None

    was_waiting, failure = asyncio.run(go())
    assert dropped("impression", "sink_error") == before
    assert was_waiting and isinstance(failure, UnknownRequest), failure
    with redis.Redis.from_url(redis_server.url) as client:
        assert client.xlen("ltr:impressions") == 1


def test_feedback_is_not_acknowledged_while_redis_does_not_answer(
    redis_server: RedisServer,
) -> None:
    """A soak trial: during a 10 s Redis pause, feedback was answered 202 after 2 s (its
    de-duplication skipped) and its record then dropped with the sink's batch."""

    async def go() -> tuple[int, int]:
        log = ImpressionLog(settings(redis_url=redis_server.url))
        assert log.sink is not None
        await log.start()
        log.log_rerank(answer("r1", ["a"], [0]), None, None, None, ["a"], features(1))
        await log.sink.flush()
        redis_server.pause()
        try:
            with pytest.raises(FeedbackUnavailable, match="impression store unavailable"):
                await log.record_feedback("r1", [click("a")])
        finally:
            redis_server.resume()
        retried = await log.record_feedback("r1", [click("a")])  # not a duplicate
        await log.close()
        return retried

    assert asyncio.run(go()) == (1, 0)
    with redis.Redis.from_url(redis_server.url) as client:
        assert client.xlen("ltr:feedback") == 1


def test_feedback_on_impressions_a_redis_outage_lost_is_not_acknowledged(
    redis_server: RedisServer,
) -> None:
    """A trial: with Redis killed, an impression's write failed (dropped); after Redis came
    back empty, feedback on it, and on one written before the outage, was answered 202 (the
    worker still knew both ids) though no impression could ever match it."""
    config = settings(redis_url=redis_server.url)

    async def go() -> None:
        log = ImpressionLog(config)
        assert log.sink is not None
        log.log_rerank(answer("before", ["a"], [0]), None, None, None, ["a"], features(1))
        await log.sink.flush()  # written
        redis_server.kill()
        log.log_rerank(answer("during", ["b"], [0]), None, None, None, ["b"], features(1))
        await log.sink.flush()  # the write fails: dropped
        redis_server.restart()  # empty: it keeps nothing on disk
        for request_id, cid in (("before", "a"), ("during", "b")):
            with pytest.raises(UnknownRequest):
                await log.record_feedback(request_id, [click(cid)])
        log.log_rerank(answer("after", ["c"], [0]), None, None, None, ["c"], features(1))
        assert await log.record_feedback("after", [click("c")]) == (1, 0)  # still queued
        await log.close()

    asyncio.run(go())
