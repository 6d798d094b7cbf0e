"""Read the service's impression and feedback logs (format: `app/impressions/sink.py`).

A source is a JSONL file, a directory of `*.jsonl` files (read in name order), or a Redis URL
`redis://host:port/db?prefix=ltr:` whose `{prefix}impressions` and `{prefix}feedback` streams
are read whole. An unreadable last line without a final newline is the write in progress of a
live log, or what a killed writer left: it is skipped and its file:line recorded
(`ClickLogs.truncated`) for the caller to report; any other bad line is an error naming the
file and line.
"""

from __future__ import annotations

import base64
import binascii
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np
import orjson

from trainer.data.errors import DataFormatError, located, quote
from trainer.data.sniff import packed

EVENT_TYPES = ("click", "purchase", "dwell")
XRANGE_PAGE = 1000


@dataclass(frozen=True)
class Impression:
    request_id: str
    ts: float  # Unix seconds
    query_id: str | int | None
    user_id: str | None
    user_cluster: str | None
    model: str
    version: str
    ids: list[Any]  # served candidate ids, best first
    positions: np.ndarray  # int64 [n], 1-based served positions aligned with ids
    features: np.ndarray  # float32 [n, n_features]
    # Online experiment the request was in (app/impressions/sink.py), else None.
    experiment: dict[str, Any] | None = None
    # Explored answer (app/api/exploration.py): the position swapped with the first, else None.
    explored: int | None = None


@dataclass(frozen=True)
class LoggedFeedbackEvent:
    request_id: str
    ts: float
    id: Any
    type: str
    value: float | None


@dataclass(frozen=True)
class ClickLogs:
    impressions: list[Impression]
    feedback: list[LoggedFeedbackEvent]
    truncated: list[str] = field(default_factory=list)  # "file:line" of unreadable last lines


def decode_features(text: str, n_rows: int, n_features: int) -> np.ndarray:
    """The base64 float32 little-endian row-major matrix → float32 [n_rows, n_features]."""
    raw = base64.b64decode(text, validate=True)
    if len(raw) != 4 * n_rows * n_features:
        raise ValueError(f"features hold {len(raw)} bytes, expected 4 x {n_rows} x {n_features}")
    return np.frombuffer(raw, dtype="<f4").reshape(n_rows, n_features).astype(np.float32)


def _timestamp(doc: dict[str, Any]) -> float:
    """The record's `ts`: a finite number of Unix seconds (float() would also take a string or
    NaN, and its message for null names no field)."""
    ts = doc["ts"]
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts):
        shown = quote(ts) if isinstance(ts, str) else repr(ts)
        raise ValueError(f"'ts' must be a number (Unix seconds), got {shown}")
    return float(ts)


def _impression(doc: dict[str, Any]) -> Impression:
    ids = doc["ids"]
    positions = np.asarray(doc["positions"], dtype=np.int64)
    if not isinstance(ids, list) or positions.shape != (len(ids),):
        raise ValueError("'ids' and 'positions' must be lists of the same length")
    if len(ids) and positions.min() < 1:
        raise ValueError("positions must be 1-based")
    # The service refuses duplicate ids; a record holding two would copy one click to both.
    if len({orjson.dumps(i) for i in ids}) != len(ids):
        raise ValueError("'ids' holds a duplicate id")
    features = decode_features(doc["features"], len(ids), int(doc["n_features"]))
    return Impression(
        request_id=str(doc["request_id"]),
        ts=_timestamp(doc),
        query_id=doc.get("query_id"),
        user_id=doc.get("user_id"),
        user_cluster=doc.get("user_cluster"),
        model=str(doc["model"]),
        version=str(doc["version"]),
        ids=ids,
        positions=positions,
        features=features,
        experiment=_experiment(doc.get("experiment"), len(ids)),
        explored=_explored(doc.get("explored"), len(ids)),
    )


def _experiment(field: Any, n: int) -> dict[str, Any] | None:
    if field is None:
        return None
    if not isinstance(field, dict) or not isinstance(field.get("name"), str):
        raise ValueError("'experiment' must be an object with a 'name'")
    teams = field.get("teams")
    if teams is not None and (not isinstance(teams, list) or len(teams) != n):
        raise ValueError("'experiment.teams' must be a list aligned with 'ids'")
    return field


def _explored(field: Any, n: int) -> int | None:
    if field is None:
        return None
    if type(field) is not int or not 2 <= field <= n:
        raise ValueError(f"'explored' must be a position from 2 to {n} (the list's), got {field!r}")
    return field


def _events(doc: dict[str, Any]) -> list[LoggedFeedbackEvent]:
    out = []
    ts = _timestamp(doc)
    for event in doc["events"]:
        if event["type"] not in EVENT_TYPES:
            raise ValueError(f"event type {event['type']!r} is not one of {EVENT_TYPES}")
        value = event.get("value")
        # As strict as /feedback: a logged "40" (a string) was read as 40 s of dwell.
        if value is not None and (
            type(value) not in (int, float) or not (math.isfinite(value) and value >= 0)
        ):
            raise ValueError(f"event value {value!r} is not a finite number >= 0 or null")
        out.append(
            LoggedFeedbackEvent(
                request_id=str(doc["request_id"]),
                ts=ts,
                id=event["id"],
                type=event["type"],
                value=None if value is None else float(value),
            )
        )
    return out


def _add(doc: Any, logs: ClickLogs) -> None:
    if not isinstance(doc, dict):
        raise ValueError("expected a JSON object")
    kind = doc.get("kind")
    if kind == "impression":
        logs.impressions.append(_impression(doc))
    elif kind == "feedback":
        logs.feedback.extend(_events(doc))
    else:
        raise ValueError(f"'kind' is {kind!r}, expected 'impression' or 'feedback'")


_RECORD_ERRORS = (ValueError, KeyError, TypeError, binascii.Error, orjson.JSONDecodeError)


def truncated_warnings(logs: ClickLogs) -> list[str]:
    """What a command prints for each unreadable last line it skipped."""
    return [
        f"warning: {where}: skipped an unreadable last line with no final newline "
        "(a write in progress, or a writer that was stopped)"
        for where in logs.truncated
    ]


def read_jsonl(path: Path, logs: ClickLogs | None = None) -> ClickLogs:
    logs = logs if logs is not None else ClickLogs([], [])
    data = path.read_bytes()
    what = packed(data)
    if what is not None:  # it read "line 1: bad log record: str is not valid UTF-8"
        raise located(path, None, f"{what}; a log is JSON lines")
    data = data.removeprefix(b"\xef\xbb\xbf")  # a BOM, as the other readers take it
    lines = data.split(b"\n")
    # Without a final newline the last line may be a write in progress: kept if it parses,
    # else recorded, so that a log cut by a killed writer does not lose a record silently.
    unterminated = len(lines)
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            _add(orjson.loads(line), logs)
        except _RECORD_ERRORS as exc:
            if number == unterminated:
                logs.truncated.append(f"{path}:{number}")
                break
            what = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
            raise located(path, number, f"bad log record: {what}") from None
    return logs


def read_redis(url: str) -> ClickLogs:
    """Both streams of the service whose Redis is `url` (`?prefix=` defaults to `ltr:`)."""
    import redis

    parts = urlsplit(url)
    prefix = parse_qs(parts.query).get("prefix", ["ltr:"])[0]
    plain = parts._replace(query="").geturl()
    from trainer.redis_publish import check_redis_url, redacted

    try:
        check_redis_url(plain, "log source")
    except ValueError as exc:
        raise DataFormatError(str(exc)) from None
    logs = ClickLogs([], [])
    client = redis.Redis.from_url(plain)
    try:
        for stream in (f"{prefix}impressions", f"{prefix}feedback"):
            start = "-"
            while True:
                entries: list[Any] = client.xrange(  # type: ignore[assignment]
                    stream, min=start, max="+", count=XRANGE_PAGE
                )
                for entry_id, fields in entries:
                    try:
                        _add(orjson.loads(fields[b"data"]), logs)
                    except _RECORD_ERRORS as exc:
                        where = f"{redacted(plain)} stream {stream} entry {entry_id.decode()}"
                        raise DataFormatError(f"{where}: bad log record: {exc}") from None
                if len(entries) < XRANGE_PAGE:
                    break
                start = "(" + entries[-1][0].decode()
    except redis.RedisError as exc:
        raise DataFormatError(f"{redacted(plain)}: cannot read the log streams: {exc}") from None
    finally:
        client.close()
    return logs


def read_logs(source: str | Path) -> ClickLogs:
    """Impressions and feedback from a JSONL file, a directory of them, or a Redis URL."""
    text = str(source)
    if text.startswith(("redis://", "rediss://", "unix://")):
        return read_redis(text)
    path = Path(source)
    if path.is_dir():
        files = sorted(path.glob("*.jsonl"))
        if not files:
            raise located(path, None, "no *.jsonl log files in this directory")
        logs = ClickLogs([], [])
        for file in files:
            read_jsonl(file, logs)
        return logs
    if not path.is_file():
        raise located(path, None, "no such file or directory")
    return read_jsonl(path)
