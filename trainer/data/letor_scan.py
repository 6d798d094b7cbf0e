"""Compiled single-pass scanner over the bytes of a LETOR/SVMlight file.

It parses the common case only — decimal numbers that convert exactly (Clinger's fast path:
a mantissa below 2**53 times or over an exact power of ten, so the result is the correctly
rounded double, the same as Python's float()), feature ids in increasing order, `qid:` right
after the label — and marks every other line as deferred. The caller re-parses deferred lines
with the reference parser (`letor_line`), which either accepts them or names what is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from trainer.data.letor_line import MAX_FEATURE_ID

_POW10 = np.array([10.0**i for i in range(23)], dtype=np.float64)
_MAX_MANTISSA = 2**53

_SPACE, _TAB, _CR = 32, 9, 13
_NEWLINE, _HASH, _COLON, _DOT, _PLUS, _MINUS, _ZERO = 10, 35, 58, 46, 43, 45, 48


@numba.njit(cache=True)
def _is_space(c: int) -> bool:
    return c == _SPACE or _TAB <= c <= _CR  # \t \n \v \f \r


@numba.njit(cache=True)
def _number(buf: np.ndarray, i: int, end: int) -> tuple[float, int, bool]:
    """(value, index after the literal, ok) for the decimal literal at `buf[i:end]`."""
    negative = False
    if i < end and (buf[i] == _MINUS or buf[i] == _PLUS):
        negative = buf[i] == _MINUS
        i += 1
    mantissa = 0
    exponent = 0
    digits = 0
    while i < end and 0 <= buf[i] - _ZERO <= 9:
        mantissa = mantissa * 10 + (buf[i] - _ZERO)
        if mantissa > _MAX_MANTISSA:
            return 0.0, i, False
        digits += 1
        i += 1
    if i < end and buf[i] == _DOT:
        i += 1
        while i < end and 0 <= buf[i] - _ZERO <= 9:
            mantissa = mantissa * 10 + (buf[i] - _ZERO)
            if mantissa > _MAX_MANTISSA:
                return 0.0, i, False
            exponent -= 1
            digits += 1
            i += 1
    if digits == 0:
        return 0.0, i, False
    if i < end and (buf[i] == 101 or buf[i] == 69):  # e, E
        i += 1
        sign = 1
        if i < end and (buf[i] == _MINUS or buf[i] == _PLUS):
            sign = -1 if buf[i] == _MINUS else 1
            i += 1
        power = 0
        power_digits = 0
        while i < end and 0 <= buf[i] - _ZERO <= 9:
            power = power * 10 + (buf[i] - _ZERO)
            if power > 1000:
                return 0.0, i, False
            power_digits += 1
            i += 1
        if power_digits == 0:
            return 0.0, i, False
        exponent += sign * power
    if mantissa == 0:
        value = 0.0
    elif 0 <= exponent <= 22:
        value = mantissa * _POW10[exponent]
    elif -22 <= exponent < 0:
        value = mantissa / _POW10[-exponent]
    else:
        return 0.0, i, False
    return (-value if negative else value), i, True


@numba.njit(cache=True)
def _ends_token(buf: np.ndarray, i: int, end: int) -> bool:
    return i >= end or _is_space(buf[i])


@dataclass
class Scan:
    """What the scanner read; rows [0, n) are filled, `deferred` rows need the reference parser."""

    features: np.ndarray  # float32 [row_cap, width]
    labels: np.ndarray  # float64 [row_cap]
    qids: np.ndarray  # int64 [row_cap]
    has_qid: np.ndarray  # bool [row_cap]
    line_no: np.ndarray  # int64 [row_cap], 1-based line of each row
    line_span: np.ndarray  # int64 [row_cap, 2], byte range of each row's line
    deferred: np.ndarray  # bool [row_cap]
    n: int = 0
    max_id: int = 0


def scan(data: bytes, width: int, max_width: int) -> Scan:
    """Scan a file's bytes starting with `width` columns; `max_width` > 0 forces the width
    (larger ids are deferred, hence reported), else the matrix widens as ids appear."""
    buf = np.frombuffer(data, dtype=np.uint8)
    row_cap = data.count(b"\n") + 1
    out = Scan(
        features=np.zeros((row_cap, width), dtype=np.float32),
        labels=np.zeros(row_cap, dtype=np.float64),
        qids=np.zeros(row_cap, dtype=np.int64),
        has_qid=np.zeros(row_cap, dtype=np.bool_),
        line_no=np.zeros(row_cap, dtype=np.int64),
        line_span=np.zeros((row_cap, 2), dtype=np.int64),
        deferred=np.zeros(row_cap, dtype=np.bool_),
    )
    pos = line = 0
    while True:
        # Allocation stays out of the compiled code (it compiles far faster); the kernel stops
        # at a line needing more columns, and resumes there once the matrix is wider.
        pos, line, out.n, top, wanted = _scan_kernel(
            buf, pos, line, out.n, max_width, out.features, out.labels, out.qids,
            out.has_qid, out.line_no, out.line_span, out.deferred,
        )  # fmt: skip
        out.max_id = max(out.max_id, top)
        if wanted == 0:
            return out
        old = out.features
        out.features = np.zeros((row_cap, max(wanted, old.shape[1] * 3 // 2 + 1)), np.float32)
        out.features[: out.n, : old.shape[1]] = old[: out.n]


@numba.njit(cache=True, nogil=True)
def _scan_kernel(
    buf: np.ndarray,
    pos: int,
    line: int,
    n: int,
    max_width: int,
    features: np.ndarray,
    labels: np.ndarray,
    qids: np.ndarray,
    has_qid: np.ndarray,
    line_no: np.ndarray,
    line_span: np.ndarray,
    deferred: np.ndarray,
) -> tuple[int, int, int, int, int]:
    """Fill rows from byte `pos` (after `line` lines and `n` rows) → (pos, line, n, max_id,
    wanted): `wanted` > 0 means it stopped before a line with an id beyond the width."""
    size = buf.shape[0]
    max_id = 0
    while pos < size:
        start = pos
        stop = pos
        while stop < size and buf[stop] != _NEWLINE:
            stop += 1
        end = start
        while end < stop and buf[end] != _HASH:
            end += 1
        i = start
        while i < end and _is_space(buf[i]):
            i += 1
        if i == end:
            line += 1
            pos = stop + 1
            continue
        r = n
        line_no[r] = line + 1
        line_span[r, 0] = start
        line_span[r, 1] = stop
        deferred[r] = False
        label, i, ok = _number(buf, i, end)
        if not ok or not _ends_token(buf, i, end):
            deferred[r] = True
        else:
            labels[r] = label
        while not deferred[r] and i < end and _is_space(buf[i]):
            i += 1
        if (
            not deferred[r]
            and i + 4 <= end
            and buf[i] == 113  # q
            and buf[i + 1] == 105  # i
            and buf[i + 2] == 100  # d
            and buf[i + 3] == _COLON
        ):
            i += 4
            qid = 0
            qid_digits = 0
            while i < end and 0 <= buf[i] - _ZERO <= 9 and qid_digits < 18:
                qid = qid * 10 + (buf[i] - _ZERO)
                qid_digits += 1
                i += 1
            if qid_digits == 0 or not _ends_token(buf, i, end):
                deferred[r] = True
            qids[r] = qid
            has_qid[r] = True
        previous = 0
        while not deferred[r]:
            while i < end and _is_space(buf[i]):
                i += 1
            if i >= end:
                break
            fid = 0
            id_digits = 0
            while i < end and 0 <= buf[i] - _ZERO <= 9 and fid <= MAX_FEATURE_ID:
                fid = fid * 10 + (buf[i] - _ZERO)
                id_digits += 1
                i += 1
            if id_digits == 0 or i >= end or buf[i] != _COLON or fid <= previous:
                deferred[r] = True
                break
            if fid > features.shape[1]:
                if max_width > 0 or fid > MAX_FEATURE_ID:
                    deferred[r] = True
                    break
                for column in range(features.shape[1]):  # undo this row; resume when wider
                    features[r, column] = 0.0
                return pos, line, n, max_id, fid
            value, i, ok = _number(buf, i + 1, end)
            if not ok or not _ends_token(buf, i, end):
                deferred[r] = True
                break
            features[r, fid - 1] = np.float32(value)
            previous = fid
            max_id = max(max_id, fid)
        n += 1
        line += 1
        pos = stop + 1
    return pos, line, n, max_id, 0
