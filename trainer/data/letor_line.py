"""The reference parser of one LETOR/SVMlight line, `label [qid:N] id:value ... [# comment]`.

The compiled scanner (`letor_scan`) handles the common case at speed and hands every line it
is unsure about to this parser, which either parses it or names precisely what is wrong.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from app.errors import LtrError
from trainer.data.errors import clip, quote
from trainer.data.float32 import BEYOND_FLOAT32, beyond_float32

# Python's float() also accepts `1_000`, `infinity` and surrounding blanks; the format does not.
# ASCII only: `\d` and str.split() also take other scripts' digits (`１`, read as 1) and blanks
# (a no-break space), which no other reader of the format takes.
_NUMBER = re.compile(
    r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|nan|inf)", re.IGNORECASE | re.ASCII
)
_INTEGER = re.compile(r"[+-]?\d+", re.ASCII)
_BLANKS = re.compile(r"[ \t\r\n\v\f]+")
# The reader builds a dense matrix, so ids are column numbers; larger ones are almost surely
# hashed sparse features this format cannot hold (and would exhaust memory).
MAX_FEATURE_ID = 100_000
_INT64_DIGITS = 19


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


def _digits(integer: str) -> int:
    """Significant digits of an integer literal: Python's int() refuses more than 4,300 (a
    ValueError, not a LineError), so longer ones are judged before converting."""
    return len(integer.lstrip("+-").lstrip("0"))


def strip_comment(line: bytes) -> bytes:
    cut = line.find(b"#")
    return line if cut < 0 else line[:cut]


def parse_line(text: str, max_id: int | None = None) -> ParsedLine | None:
    """Parse one line without its comment; None for a blank line.

    `max_id` is the forced feature width (ids above it are an error).
    """
    # str.split() is 4x faster; on ASCII text it splits where the format does.
    tokens = text.split() if text.isascii() else [t for t in _BLANKS.split(text) if t]
    if not tokens:
        return None
    label = parse_number(tokens[0])
    if label is None:
        raise LineError(f"label {quote(tokens[0])} is not a number")
    if label != label or label in (float("inf"), float("-inf")):
        raise LineError(f"label {quote(tokens[0])} is not a finite number")
    qid: int | None = None
    ids: list[int] = []
    values: list[float] = []
    seen: set[int] = set()
    for position, token in enumerate(tokens[1:], start=1):
        key, colon, raw = token.partition(":")
        if not colon or not key:
            raise LineError(f"malformed token {quote(token)} (expected id:value)")
        if key == "qid":
            if position != 1:
                raise LineError(f"{quote(token)}: qid: must come right after the label")
            if not _INTEGER.fullmatch(raw):
                raise LineError(f"qid {quote(raw)} is not an integer")
            if _digits(raw) > _INT64_DIGITS or not -(2**63) <= int(raw) < 2**63:
                raise LineError(f"qid {clip(raw)} does not fit in 64 bits")
            qid = int(raw)
            continue
        if not _INTEGER.fullmatch(key):
            raise LineError(f"feature id {quote(key)} is not an integer (token {quote(token)})")
        fid = int(key) if _digits(key) <= _INT64_DIGITS else (-1 if key[0] == "-" else 2**63)
        if fid <= 0:
            what = f"feature id {clip(key)} is not valid: ids are 1-based"
            raise LineError(f"{what} (token {quote(token)})")
        if fid > MAX_FEATURE_ID:
            raise LineError(f"feature id {clip(key)} is too large (at most {MAX_FEATURE_ID:,})")
        if max_id is not None and fid > max_id:
            raise LineError(f"feature id {fid} exceeds num_features={max_id}")
        if fid in seen:
            raise LineError(f"duplicate feature id {fid}")
        value = parse_number(raw)
        if value is None:
            raise LineError(f"value {quote(raw)} of feature {fid} is not a number")
        # float32 would make it ±inf; so would float64 a number written past its range (1e400)
        if beyond_float32(value) or (math.isinf(value) and "inf" not in raw.lower()):
            raise LineError(f"value {quote(raw)} of feature {fid} {BEYOND_FLOAT32}")
        seen.add(fid)
        ids.append(fid)
        values.append(value)
    return ParsedLine(label=label, qid=qid, ids=ids, values=values)
