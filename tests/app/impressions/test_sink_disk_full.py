"""The JSONL log on a full disk: a write that fails part-way leaves no torn line for the next
record to be glued to, and while the disk stays full, feedback is refused (503), not accepted
and dropped."""

from __future__ import annotations

import asyncio
import errno
import os
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from app.impressions import sink as sink_module
from app.impressions.feedback import FeedbackUnavailable, ImpressionLog, UnknownRequest
from app.impressions.sink import ImpressionSink, JsonlWriter, feedback_record, impression_record
from tests.app.impressions.conftest import answer, dropped, features, jsonl_settings

REAL_WRITE = os.write


def disk_fills_during_next_write(path: Path) -> Callable[[int, Any], int]:
    """An os.write that, on `path` only, writes a third of the bytes it is given and then
    fails with ENOSPC, as a write that fills the disk does (other descriptors write as usual)."""
    state = {"written": False}

    def write(fd: int, data: Any) -> int:
        if not path.exists() or not os.path.samestat(os.fstat(fd), os.stat(path)):
            return REAL_WRITE(fd, data)
        if state["written"]:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        state["written"] = True
        return REAL_WRITE(fd, bytes(data[: max(1, len(data) // 3)]))

    return write


def record(request_id: str) -> dict[str, Any]:
    return impression_record(request_id, None, None, None, "m", "v1", ["a", "b"], features(2))


def test_a_write_cut_by_a_full_disk_leaves_only_whole_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: the torn bytes stayed, the next record was appended to them on the same line,
    # and `ltr dataset --from-logs` refused the whole file ("imp.jsonl:2: bad log record").
    path = tmp_path / "imp.jsonl"

    async def go() -> None:
        sink = ImpressionSink(JsonlWriter(path), queue_size=100)
        sink.submit(record("r1"))
        await sink.flush()
        with monkeypatch.context() as m:
            m.setattr(sink_module.os, "write", disk_fills_during_next_write(path))
            sink.submit(record("r2"))
            sink.submit(feedback_record("r1", [{"id": "a", "type": "click", "value": None}]))
            await sink.flush()
        assert sink.failing is not None and "No space left" in sink.failing
        sink.submit(record("r3"))
        await sink.flush()
        assert sink.failing is None

    before = dropped("impression", "sink_error")
    asyncio.run(go())
    assert dropped("impression", "sink_error") == before + 1  # the failed batch, as before
    data = path.read_bytes()
    assert data.endswith(b"\n")
    assert [orjson.loads(line)["request_id"] for line in data.splitlines()] == ["r1", "r3"]


def test_when_the_cut_cannot_be_undone_the_next_record_starts_a_new_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "imp.jsonl"

    def no_truncate(fd: int, length: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    async def go() -> None:
        writer = JsonlWriter(path)
        await writer.write([record("r1")])
        with monkeypatch.context() as m:
            m.setattr(sink_module.os, "write", disk_fills_during_next_write(path))
            m.setattr(sink_module.os, "ftruncate", no_truncate)
            with pytest.raises(OSError, match="No space left"):
                await writer.write([record("r2")])
        await writer.write([record("r3")])

    asyncio.run(go())
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b""  # ends with a newline
    assert orjson.loads(lines[0])["request_id"] == "r1"
    assert lines[1] and not lines[1].endswith(b"}")  # the torn record, alone on its line
    assert orjson.loads(lines[2])["request_id"] == "r3"  # whole, not glued to it
    assert len(lines) == 4


def low_free_space(free_bytes: int) -> Callable[[Any], Any]:
    real = os.statvfs

    def statvfs(path: Any) -> Any:
        fs = real(path)
        return types.SimpleNamespace(
            f_frsize=4096,
            f_bsize=4096,
            f_blocks=fs.f_blocks,
            f_bfree=free_bytes // 4096,
            f_bavail=free_bytes // 4096,
        )

    return statvfs


def test_feedback_is_refused_while_the_disk_stays_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: usable() re-checked the failing sink by appending b"", which a full disk allows,
    # so the call was answered 202 and its record dropped by the next write.
    config = jsonl_settings(tmp_path)
    path = config.impressions_jsonl
    assert path is not None
    click = [{"id": "a", "type": "click", "value": None}]

    async def go() -> list[object]:
        log = ImpressionLog(config)
        assert log.sink is not None
        seen: list[object] = []
        log.log_rerank(answer("r0", ["a"], [0]), None, None, None, ["a"], features(1))
        await log.sink.flush()  # the file exists, with one whole record
        with monkeypatch.context() as m:
            m.setattr(sink_module.os, "write", disk_fills_during_next_write(path))
            m.setattr(sink_module.os, "statvfs", low_free_space(8192))
            log.log_rerank(
                answer("r1", ["a", "b"], [0, 1]), None, None, None, ["a", "b"], features(2)
            )
            await log.sink.flush()  # fails: the disk is full
            seen.append(await log.sink.usable())
            seen.append(await log.sink.usable())  # asked again: still full
            with pytest.raises(FeedbackUnavailable):
                await log.record_feedback("r1", click)
            seen.append(log.sink.failing)
        seen.append(await log.sink.usable())  # space came back
        # r1's impression was dropped with its batch: feedback on it could label nothing
        # (it was acknowledged and written, an orphan, before).
        with pytest.raises(UnknownRequest, match="its impression could not be written"):
            await log.record_feedback("r1", click)
        seen.append(await log.record_feedback("r0", click))
        await log.close()
        return seen

    first, again, why, mended, accepted = asyncio.run(go())
    assert (first, again, mended, accepted) == (False, False, True, (1, 0))
    assert isinstance(why, str) and "No space left" in why and str(path) in why
    records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    assert [(r["kind"], r["request_id"]) for r in records] == [
        ("impression", "r0"),
        ("feedback", "r0"),
    ]
