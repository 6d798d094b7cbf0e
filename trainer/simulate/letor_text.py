"""Compiled LETOR line formatter: `label qid:N 1:v 2:v ...` for a block of rows at once.

Python's and Arrow's float-to-text paths cost ~250 ns a value, which makes a 10-million-row
text file take minutes; this writes the fixed-point form directly into a byte buffer.
Values must be float32 rounded to DECIMALS places (documents.DECIMALS): the text is the
4-decimal number nearest the value, which reads back as the same float32.
"""

from __future__ import annotations

import numba
import numpy as np

from trainer.simulate.documents import DECIMALS

if DECIMALS != 4:  # _put_fixed writes exactly four decimals
    raise ImportError(f"letor_text supports 4 decimals, documents.DECIMALS is {DECIMALS}")
_BLOCK_ROWS = 16_384
# Bytes one value can take: sign, 15 integer digits, point, decimals.
_VALUE_BYTES = 17 + DECIMALS


@numba.njit(cache=True, inline="always")
def _put_uint(out: np.ndarray, at: int, value: int) -> int:
    if value < 10:
        out[at] = 48 + value
        return at + 1
    digits = 1
    probe = value
    while probe >= 10:
        probe //= 10
        digits += 1
    end = at + digits
    i = end - 1
    while value >= 10:
        rest = value // 10
        out[i] = 48 + (value - rest * 10)
        value = rest
        i -= 1
    out[i] = 48 + value
    return end


@numba.njit(cache=True, inline="always")
def _put_fixed(out: np.ndarray, at: int, value: float) -> int:
    """`value` with up to 4 decimals, trailing zeros dropped."""
    scaled = int(np.rint(np.float64(value) * 10_000))
    if scaled < 0:
        out[at] = 45  # '-'
        at += 1
        scaled = -scaled
    whole = scaled // 10_000
    at = _put_uint(out, at, whole)
    rest = scaled - whole * 10_000
    if rest == 0:
        return at
    # Written out digit by digit: constant divisors compile to multiplications, which a loop
    # over the place values does not get (1.6x slower).
    d0 = rest // 1_000
    rest -= d0 * 1_000
    d1 = rest // 100
    rest -= d1 * 100
    d2 = rest // 10
    d3 = rest - d2 * 10
    out[at] = 46  # '.'
    out[at + 1] = 48 + d0
    if d1 == 0 and d2 == 0 and d3 == 0:
        return at + 2
    out[at + 2] = 48 + d1
    if d2 == 0 and d3 == 0:
        return at + 3
    out[at + 3] = 48 + d2
    if d3 == 0:
        return at + 4
    out[at + 4] = 48 + d3
    return at + 5


@numba.njit(cache=True)
def _format_block(
    labels: np.ndarray,
    qids: np.ndarray,
    values: np.ndarray,
    out: np.ndarray,
) -> int:
    at = 0
    for r in range(values.shape[0]):
        at = _put_uint(out, at, labels[r])
        out[at] = 32  # " qid:"
        out[at + 1] = 113
        out[at + 2] = 105
        out[at + 3] = 100
        out[at + 4] = 58
        at = _put_uint(out, at + 5, qids[r])
        for j in range(values.shape[1]):
            out[at] = 32
            at = _put_uint(out, at + 1, j + 1)
            out[at] = 58
            at = _put_fixed(out, at + 1, values[r, j])
        out[at] = 10
        at += 1
    return at


def format_letor(labels: np.ndarray, qids: np.ndarray, features: np.ndarray) -> bytes:
    """LETOR text of rows: labels int [n] (>= 0), qids int [n] (>= 0), features float32
    [n, n_features] with |value| < 1e15. Returns the lines, each ending in a newline."""
    labels = np.ascontiguousarray(labels, dtype=np.int64)
    qids = np.ascontiguousarray(qids, dtype=np.int64)
    features = np.ascontiguousarray(features, dtype=np.float32)
    n, width = features.shape
    per_row = 48 + width * (len(str(width)) + 2 + _VALUE_BYTES)
    buffer = np.empty(min(n, _BLOCK_ROWS) * per_row, dtype=np.uint8)
    parts = []
    for start in range(0, n, _BLOCK_ROWS):
        stop = min(start + _BLOCK_ROWS, n)
        used = _format_block(labels[start:stop], qids[start:stop], features[start:stop], buffer)
        parts.append(buffer[:used].tobytes())
    return b"".join(parts)


def format_column(values: np.ndarray) -> bytes:
    """One integer per line (the `.position` and `.click` side files)."""
    if values.size == 0:
        return b""
    return ("\n".join(map(str, np.asarray(values).tolist())) + "\n").encode()
