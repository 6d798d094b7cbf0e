"""Scanned candidates' features into the model's matrix, compiled (numba): lists copied, and
name -> value maps placed by name (app.api.body_scan, whose scan records each name's offsets).

Names are looked up in an open-addressing table of the model's names (FNV-1a, linear
probing), each match confirmed byte by byte, so that no name can stand for another.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types  # helpers inline="always": app.numba_jit says why

from app.numba_jit import nogil_jit

OK, GIVE_UP = 0, 1
FNV_OFFSET = np.uint64(14695981039346656037)
FNV_PRIME = np.uint64(1099511628211)
# (raw, values, keys, counts, maps, names, name offsets, slots, matrix, ignore unknown,
# features optional, names unique)
SIGNATURE = types.int64(
    types.Array(types.uint8, 1, "C", readonly=True),
    types.Array(types.float32, 1, "C", readonly=True),
    types.Array(types.int64, 1, "C", readonly=True),
    types.Array(types.int64, 1, "C", readonly=True),
    types.Array(types.uint8, 1, "C", readonly=True),
    types.Array(types.uint8, 1, "C", readonly=True),
    types.Array(types.int64, 1, "C", readonly=True),
    types.Array(types.int64, 1, "C", readonly=True),
    types.float32[:, ::1],
    types.boolean,
    types.boolean,
    types.boolean,
)


@njit(cache=True, nogil=True, inline="always")
def _is_name(raw, start, end, names, offsets, c):  # type: ignore[no-untyped-def]
    """Whether raw[start:end] is the name of column c."""
    a = offsets[c]
    if offsets[c + 1] - a != end - start:
        return False
    for t in range(end - start):  # noqa: SIM110 (numba compiles no generator here)
        if names[a + t] != raw[start + t]:
            return False
    return True


@njit(cache=True, nogil=True, inline="always")
def _column(raw, start, end, names, offsets, slots):  # type: ignore[no-untyped-def]
    """The column of the name raw[start:end], or -1."""
    h = FNV_OFFSET
    for t in range(start, end):
        h = (h ^ np.uint64(raw[t])) * FNV_PRIME
    mask = slots.shape[0] - 1
    j = np.int64(h & np.uint64(mask))
    while True:
        c = slots[j]
        if c < 0:
            return -1
        if _is_name(raw, start, end, names, offsets, c):
            return c
        j = (j + 1) & mask


def _fill(  # type: ignore[no-untyped-def]
    raw, values, keys, counts, maps, names, offsets, slots, matrix, ignore_unknown, optional, unique
):
    """Writes each candidate's values into matrix[row, :width] (NaN-filled by the caller):
    OK, or GIVE_UP for what build_matrix must name (a list of another length, an unknown
    name unless `ignore_unknown`, no features unless `optional`). A name given twice keeps
    its last value, as a decoded JSON object does. With `unique` names, each name is first
    compared with the column after the previous name's: a client that writes its maps in the
    model's order skips the hash (1,000 x 136 names, 5 % left out: 1.40 ms against 1.97
    without the guess; x 46 names, none left out: 0.44 against 0.82 ms; one process)."""
    width = offsets.shape[0] - 1
    nv = 0
    nk = 0
    for r in range(counts.shape[0]):
        k = counts[r]
        if k < 0:
            if not optional:
                return GIVE_UP
            continue
        if maps[r] == 0:
            if k != width:
                return GIVE_UP
            for j in range(k):
                matrix[r, j] = values[nv + j]
        else:
            guess = 0
            for j in range(k):
                start, end = keys[2 * (nk + j)], keys[2 * (nk + j) + 1]
                if unique and guess < width and _is_name(raw, start, end, names, offsets, guess):
                    col = guess
                else:
                    col = _column(raw, start, end, names, offsets, slots)
                if col >= 0:
                    matrix[r, col] = values[nv + j]
                    guess = col + 1
                elif not ignore_unknown:
                    return GIVE_UP
            nk += k
        nv += k
    return OK


fill = nogil_jit(_fill, SIGNATURE)
