from __future__ import annotations

import asyncio
import base64
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
import redis

from app.impressions import sink as sink_module
from app.impressions.sink import (
    BATCH_MAX,
    ImpressionSink,
    JsonlWriter,
    RedisStreamWriter,
    encode_features,
    feedback_record,
    impression_record,
    make_writer,
)
from tests.app.impressions.conftest import dropped, features, jsonl_settings, settings
from tests.support.redis_server import RedisServer


def test_features_encode_as_little_endian_float32_rows() -> None:
    matrix = np.array([[1.0, np.nan], [-2.5, 3.0]], dtype=np.float32)
    raw = base64.b64decode(encode_features(matrix))
    back = np.frombuffer(raw, dtype="<f4").reshape(2, 2)
    np.testing.assert_array_equal(back, matrix)


def test_impression_record_serves_positions_in_order() -> None:
    record = impression_record("r1", "q", "u1", "US", "m", "v1", ["b", "a"], features(2), ts=5.0)
    assert record["positions"] == [1, 2]
    assert record["ids"] == ["b", "a"]
    assert record["n_features"] == 3


def test_sink_writes_batches_to_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "imp.jsonl"

    async def go() -> None:
        sink = ImpressionSink(JsonlWriter(path), queue_size=100)
        await sink.start()
        for i in range(5):
            assert sink.submit(
                impression_record(f"r{i}", None, None, None, "m", "v1", ["a"], features(1))
            )
        sink.submit(feedback_record("r0", [{"id": "a", "type": "click", "value": None}]))
        await sink.close()  # drains what is queued

    asyncio.run(go())
    lines = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    assert [d["kind"] for d in lines] == ["impression"] * 5 + ["feedback"]
    assert lines[0]["features"] == encode_features(features(1))


class Broken:
    async def write(self, records: list[dict[str, Any]]) -> None:
        raise ConnectionError("sink down")

    async def check(self) -> None:
        raise ConnectionError("sink down")

    async def close(self) -> None:
        return None


class Stuck:
    async def write(self, records: list[dict[str, Any]]) -> None:
        await asyncio.sleep(3600)

    async def check(self) -> None:
        return None

    async def close(self) -> None:
        return None


def test_full_queue_drops_and_counts_without_blocking() -> None:
    async def go() -> list[bool]:
        sink = ImpressionSink(Stuck(), queue_size=2)  # never started: nothing drains
        record = feedback_record("r", [])
        return [sink.submit(record) for _ in range(4)]

    before = dropped("feedback", "queue_full")
    assert asyncio.run(go()) == [True, True, False, False]
    assert dropped("feedback", "queue_full") == before + 2


def test_a_stalled_sink_holds_at_most_its_bytes() -> None:
    """Before: 10,000 records whatever they held; an impression holds its feature rows, 544 KB
    at 1,000 candidates x 136 features, so a stalled sink held 5 GB."""
    rows = np.zeros((1000, 136), np.float32)

    async def go() -> tuple[list[bool], int, bool]:
        sink = ImpressionSink(Broken(), queue_size=10_000, max_bytes=4 * rows.nbytes)
        record = impression_record("r", None, None, None, "m", "v", ["a"] * 1000, rows)
        accepted = [sink.submit(record, rows.nbytes) for _ in range(6)]  # nothing drains
        await sink.flush()  # taken (and dropped: the writer fails): their bytes are free
        return accepted, sink.queued_bytes, sink.submit(record, rows.nbytes)

    before = dropped("impression", "queue_full")
    accepted, left, again = asyncio.run(go())
    assert accepted == [True] * 4 + [False] * 2
    assert dropped("impression", "queue_full") == before + 2
    assert left == 0 and again


def test_a_batch_being_written_still_counts_against_the_bytes() -> None:
    """A re-check trial: bytes were released when a batch left the queue, so behind a paused
    Redis each stalled write held up to 256 more records (RSS 1.0 -> 3.2 GB, 256 MB allowed)."""
    rows = np.zeros((100, 10), np.float32)

    async def go() -> tuple[list[bool], bool, int]:
        sink = ImpressionSink(Stuck(), queue_size=1000, max_bytes=4 * rows.nbytes)
        record = impression_record("r", None, None, None, "m", "v", ["a"] * 100, rows)
        await sink.start()
        accepted = [sink.submit(record, rows.nbytes) for _ in range(4)]
        await asyncio.sleep(0.05)  # the drain task takes them: one write, stuck
        later = sink.submit(record, rows.nbytes)
        held = sink.queued_bytes
        await sink.close()
        return accepted, later, held

    accepted, later, held = asyncio.run(go())
    assert accepted == [True] * 4 and not later and held == 4 * rows.nbytes


def test_failing_sink_drops_and_counts() -> None:
    async def go() -> None:
        sink = ImpressionSink(Broken(), queue_size=10)
        await sink.start()
        sink.submit(feedback_record("r", []))
        sink.submit(feedback_record("r", []))
        await asyncio.sleep(0.05)
        await sink.close()

    before = dropped("feedback", "sink_error")
    asyncio.run(go())
    assert dropped("feedback", "sink_error") == before + 2


def test_a_sink_that_cannot_write_says_so_from_the_start_until_it_can(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    target = tmp_path / "impressions.jsonl"
    target.mkdir()  # a directory where the file should be: every write fails

    async def go() -> list[bool | str | None]:
        sink = ImpressionSink(JsonlWriter(target), queue_size=10)
        await sink.start()
        seen: list[bool | str | None] = [sink.failing is not None, await sink.usable()]
        for _ in range(200):  # the drain task's own check, which logs, runs beside this one
            if "the impression log cannot be written" in caplog.text:
                break
            await asyncio.sleep(0.01)
        target.rmdir()
        seen.append(await sink.usable())
        sink.submit(feedback_record("r", []))
        await sink.close()
        seen.append(sink.failing)
        return seen

    assert asyncio.run(go()) == [True, False, True, None]
    assert "the impression log cannot be written" in caplog.text  # said at start-up
    assert len(target.read_bytes().splitlines()) == 1


def test_make_writer_prefers_redis(tmp_path: Path) -> None:
    assert make_writer(settings()) is None
    assert isinstance(make_writer(jsonl_settings(tmp_path)), JsonlWriter)
    writer = make_writer(settings(redis_url="redis://127.0.0.1:1/0"))
    assert isinstance(writer, RedisStreamWriter)
    asyncio.run(writer.close())


def test_redis_writer_streams_and_indexes(redis_server: RedisServer) -> None:
    async def go() -> None:
        writer = make_writer(
            settings(
                redis_url=redis_server.url, impressions_stream_maxlen=10, impressions_ttl_seconds=60
            )
        )
        assert writer is not None
        records = [
            impression_record(f"r{i}", "q", None, None, "m", "v1", ["a", 7], features(2))
            for i in range(300)
        ]
        await writer.write(records)
        await writer.write([feedback_record("r1", [{"id": 7, "type": "click", "value": None}])])
        await writer.close()

    asyncio.run(go())
    with redis.Redis.from_url(redis_server.url) as client:
        # MAXLEN ~ trims by whole macro nodes: far fewer than 300 remain, at least 10.
        assert 10 <= client.xlen("ltr:impressions") < 300
        last = client.xrevrange("ltr:impressions", count=1)[0][1][b"data"]
        assert orjson.loads(last)["request_id"] == "r299"
        assert orjson.loads(client.get("ltr:imp:r5")) == ["a", 7]
        assert 0 < client.ttl("ltr:imp:r5") <= 60
        assert client.xlen("ltr:feedback") == 1


def test_close_waits_briefly_then_counts_what_is_left(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sink_module, "CLOSE_TIMEOUT_S", 0.1)
    monkeypatch.setattr(sink_module, "WRITE_TIMEOUT_S", 10.0)

    async def go() -> float:
        sink = ImpressionSink(Stuck(), queue_size=1000)
        await sink.start()
        for _ in range(BATCH_MAX + 3):  # one batch in flight (stuck), 3 left in the queue
            sink.submit(feedback_record("r", []))
        await asyncio.sleep(0.01)
        started = time.perf_counter()
        await sink.close()
        return time.perf_counter() - started

    before = dropped("feedback", "shutdown")
    assert asyncio.run(go()) < 1.0
    assert dropped("feedback", "shutdown") == before + 3
