from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import redis

from app.impressions.sink import to_json
from tests.support.redis_server import RedisServer
from tests.trainer.clicks.conftest import feedback, impression, write_log
from trainer.clicks.logs import decode_features, read_logs
from trainer.data.errors import DataFormatError


def test_reads_what_the_service_writes(tmp_path: Path) -> None:
    path = write_log(
        tmp_path / "a.jsonl",
        [
            impression("r1", ["x", 2], 10.0, user_id="u1"),
            feedback("r1", (2, "dwell", 31.5), ts=11.0),
        ],
    )
    logs = read_logs(path)
    (imp,) = logs.impressions
    assert imp.ids == ["x", 2] and imp.user_id == "u1" and imp.ts == 10.0
    np.testing.assert_array_equal(imp.positions, [1, 2])
    np.testing.assert_array_equal(imp.features, [[10.0, 0.0], [10.0, 1.0]])
    (event,) = logs.feedback
    assert (event.request_id, event.id, event.type, event.value) == ("r1", 2, "dwell", 31.5)


def test_directory_reads_every_jsonl_file(tmp_path: Path) -> None:
    write_log(tmp_path / "b.jsonl", [impression("r2", ["a"], 2.0)])
    write_log(tmp_path / "a.jsonl", [impression("r1", ["a"], 1.0)])
    (tmp_path / "notes.txt").write_text("ignored")
    assert [i.request_id for i in read_logs(tmp_path).impressions] == ["r1", "r2"]


def test_partial_last_line_is_skipped(tmp_path: Path) -> None:
    path = write_log(tmp_path / "a.jsonl", [impression("r1", ["a"], 1.0)])
    with path.open("ab") as f:
        f.write(to_json(impression("r2", ["a"], 2.0))[:40])  # the sink is mid-write
    assert len(read_logs(path).impressions) == 1


@pytest.mark.parametrize(
    ("line", "what"),
    [
        (b"not json", "bad log record"),
        (b'{"kind": "view"}', "'kind' is 'view'"),
        (b'{"kind": "feedback", "request_id": "r", "ts": 1}', "missing field 'events'"),
        (
            b'{"kind": "feedback", "request_id": "r", "ts": 1,'
            b' "events": [{"id": 1, "type": "like"}]}',
            "event type 'like'",
        ),
        (
            b'{"kind": "impression", "request_id": "r", "ts": 1, "model": "m", "version": "v",'
            b' "ids": ["a"], "positions": [1], "n_features": 2, "features": "AAAAAA=="}',
            "features hold 4 bytes",
        ),
        # A trial: a logged dwell of "40" (a string) was read as 40 s, one of two ids
        # repeated in a record got the other's click. The service writes neither.
        (
            b'{"kind": "feedback", "request_id": "r", "ts": 1,'
            b' "events": [{"id": 1, "type": "dwell", "value": "40"}]}',
            "event value '40' is not a finite number",
        ),
        (
            b'{"kind": "feedback", "request_id": "r", "ts": 1,'
            b' "events": [{"id": 1, "type": "dwell", "value": true}]}',
            "event value True",
        ),
        (
            b'{"kind": "feedback", "request_id": "r", "ts": 1,'
            b' "events": [{"id": 1, "type": "dwell", "value": -3}]}',
            "event value -3",
        ),
        (
            b'{"kind": "impression", "request_id": "r", "ts": 1, "model": "m", "version": "v",'
            b' "ids": ["a", "a"], "positions": [1, 2], "n_features": 1,'
            b' "features": "AAAAAAAAAAA="}',
            "'ids' holds a duplicate id",
        ),
    ],
)
def test_bad_line_names_file_and_line(tmp_path: Path, line: bytes, what: str) -> None:
    path = write_log(tmp_path / "a.jsonl", [impression("r1", ["a"], 1.0)])
    with path.open("ab") as f:
        f.write(line + b"\n")
    with pytest.raises(DataFormatError, match=f"a.jsonl:2: .*{what}"):
        read_logs(path)


def test_missing_source(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match="no such file"):
        read_logs(tmp_path / "absent.jsonl")
    with pytest.raises(DataFormatError, match=r"no \*\.jsonl"):
        read_logs(tmp_path)


def test_decode_features_checks_size() -> None:
    assert decode_features("AACAPw==", 1, 1).tolist() == [[1.0]]
    with pytest.raises(ValueError, match="expected 4 x 2 x 1"):
        decode_features("AACAPw==", 2, 1)


def test_reads_redis_streams(redis_server: RedisServer) -> None:
    with redis.Redis.from_url(redis_server.url) as client:
        pipe = client.pipeline(transaction=False)
        for i in range(2500):  # more than one XRANGE page
            pipe.xadd("ltr:impressions", {"data": to_json(impression(f"r{i}", ["a"], float(i)))})
        pipe.xadd("ltr:feedback", {"data": to_json(feedback("r7", ("a", "click")))})
        pipe.execute()
    logs = read_logs(f"{redis_server.url}?prefix=ltr:")
    assert len(logs.impressions) == 2500 and logs.impressions[-1].request_id == "r2499"
    assert [e.request_id for e in logs.feedback] == ["r7"]


def test_complete_last_line_without_newline_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_bytes(to_json(impression("r1", ["a"], 1.0)))
    assert len(read_logs(path).impressions) == 1


def test_partial_last_line_is_recorded_for_a_warning(tmp_path: Path) -> None:
    path = write_log(tmp_path / "a.jsonl", [impression("r1", ["a"], 1.0)])
    with path.open("ab") as f:
        f.write(b'{"kind":"feedback","request_id":"r1","ts":1.0,"ev')  # a writer was killed
    logs = read_logs(path)
    assert len(logs.impressions) == 1 and logs.truncated == [f"{path}:2"]
    write_log(tmp_path / "d" / "b.jsonl", [impression("r2", ["a"], 2.0)])
    (tmp_path / "d" / "a.jsonl").write_bytes(path.read_bytes())
    logs = read_logs(tmp_path / "d")  # the cut file is not the last one read
    assert len(logs.impressions) == 2 and logs.truncated == [f"{tmp_path / 'd' / 'a.jsonl'}:2"]
    assert read_logs(write_log(tmp_path / "c.jsonl", [impression("r", ["a"], 1.0)])).truncated == []


@pytest.mark.parametrize("ts", [None, "2026-12-03T07:00:00Z", "12.5", True])
@pytest.mark.parametrize("kind", ["impression", "feedback"])
def test_ts_must_be_a_number(tmp_path: Path, ts: object, kind: str) -> None:
    record = (
        impression("r1", ["a"], 1.0) if kind == "impression" else feedback("r1", ("a", "click"))
    )
    record["ts"] = ts
    path = write_log(tmp_path / "a.jsonl", [record, impression("r2", ["a"], 2.0)])
    with pytest.raises(DataFormatError, match=r"a\.jsonl:1: bad log record: 'ts' must be a number"):
        read_logs(path)


def test_a_redis_source_with_a_database_that_is_not_a_number_is_refused() -> None:
    """redis-py read `redis://host/abc` as database 0: the logs of another database."""
    with pytest.raises(DataFormatError, match="the database 'abc' is not a number"):
        read_logs("redis://127.0.0.1:1/abc")


def test_an_unreachable_redis_source_is_named_without_its_password() -> None:
    from tests.support.redis_server import free_port

    url = f"redis://reader:s3cret@127.0.0.1:{free_port()}/0"
    with pytest.raises(DataFormatError, match="cannot read the log streams") as info:
        read_logs(url)
    assert "s3cret" not in str(info.value)
    assert f"redis://reader:***@127.0.0.1:{url.rsplit(':', 1)[1]}" in str(info.value)


def test_a_compressed_log_is_named_as_such(tmp_path: Path) -> None:
    """It read 'a.jsonl:1: bad log record: str is not valid UTF-8'."""
    import gzip

    plain = write_log(tmp_path / "plain.jsonl", [impression("r1", ["a"], 1.0)])
    packed = tmp_path / "a.jsonl"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    with pytest.raises(DataFormatError, match=r"a.jsonl: gzip-compressed: decompress it"):
        read_logs(packed)


def test_a_byte_order_mark_is_taken_as_the_other_readers_take_it(tmp_path: Path) -> None:
    path = write_log(tmp_path / "a.jsonl", [impression("r1", ["a"], 1.0)])
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert [i.request_id for i in read_logs(path).impressions] == ["r1"]
