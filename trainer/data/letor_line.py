"""The reference parser of one LETOR/SVMlight line, `label [qid:N] id:value ... [# comment]`.

The compiled scanner (`letor_scan`) handles the common case at speed and hands every line it
is unsure about to this parser, which either parses it or names precisely what is wrong.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.errors import LtrError

# Python's float() also accepts `1_000`, `infinity` and surrounding blanks; the format does not.
_NUMBER = re.compile(r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|nan|inf)", re.IGNORECASE)
_INTEGER = re.compile(r"[+-]?\d+")
# The reader builds a dense matrix, so ids are column numbers; larger ones are almost surely
# hashed sparse features this format cannot hold (and would exhaust memory).
MAX_FEATURE_ID = 100_000


class LineError(LtrError, ValueError):
    """What is wrong with one line (the caller adds the file name and line number)."""


@dataclass(frozen=True)
class ParsedLine:
    label: float
    qid: int | None
    ids: list[int]  # 1-based feature ids, in line order
    values: list[float]


def parse_number(text: str) -> float | None:
    """The value of a numeric literal, or None when `text` is not one."""
    return float(text) if _NUMBER.fullmatch(text) else None


def strip_comment(line: bytes) -> bytes:
    cut = line.find(b"#")
    return line if cut < 0 else line[:cut]


def parse_line(text: str, max_id: int | None = None) -> ParsedLine | None:
    """Parse one line without its comment; None for a blank line.

    `max_id` is the forced feature width (ids above it are an error).
    """
    tokens = text.split()
    if not tokens:
        return None
    label = parse_number(tokens[0])
    if label is None:
        raise LineError(f"label {tokens[0]!r} is not a number")
    if label != label or label in (float("inf"), float("-inf")):
        raise LineError(f"label {tokens[0]!r} is not a finite number")
    qid: int | None = None
    ids: list[int] = []
    values: list[float] = []
    seen: set[int] = set()
    for position, token in enumerate(tokens[1:], start=1):
        key, colon, raw = token.partition(":")
        if not colon or not key:
            raise LineError(f"malformed token {token!r} (expected id:value)")
        if key == "qid":
            if position != 1:
                raise LineError(f"{token!r}: qid: must come right after the label")
            if not _INTEGER.fullmatch(raw):
                raise LineError(f"qid {raw!r} is not an integer")
            qid = int(raw)
            if not -(2**63) <= qid < 2**63:
                raise LineError(f"qid {raw} does not fit in 64 bits")
            continue
        if not _INTEGER.fullmatch(key):
            raise LineError(f"feature id {key!r} is not an integer (token {token!r})")
        fid = int(key)
        if fid <= 0:
            raise LineError(f"feature id {fid} is not valid: ids are 1-based (token {token!r})")
        if fid > MAX_FEATURE_ID:
            raise LineError(f"feature id {fid} is too large (at most {MAX_FEATURE_ID:,})")
        if max_id is not None and fid > max_id:
            raise LineError(f"feature id {fid} exceeds num_features={max_id}")
        if fid in seen:
            raise LineError(f"duplicate feature id {fid}")
        value = parse_number(raw)
        if value is None:
            raise LineError(f"value {raw!r} of feature {fid} is not a number")
        seen.add(fid)
        ids.append(fid)
        values.append(value)
    return ParsedLine(label=label, qid=qid, ids=ids, values=values)
