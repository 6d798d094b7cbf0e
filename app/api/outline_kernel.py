"""A body's outline, compiled (numba): its marks with the strings more than three deep left out.

Admission counts a body's candidates and a shed answer lists their ids, both by walking the
body's quotes and brackets (app.api.ids_kernel). A body of named features holds ~140 strings
per candidate, every one inside the candidate's `features`, four deep, where neither walk has
anything to find: 280,000 marks in a 1,000 x 136 body, 0.8 ms of the event loop's time to
find and walk. The outline keeps the brackets outside strings (found by the vector pass
app.api.marks_kernel.compile_find_structure) and the quotes at most three deep, read from the
bytes between those brackets: a few per candidate. Both walks give the same over the outline
as over every mark (tests), as neither looks at a string deeper than three.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_QUOTE = 34
_OPEN_OBJECT, _OPEN_LIST, _CLOSE_OBJECT, _CLOSE_LIST = 123, 91, 125, 93
_DEEPEST = 3  # {"candidates": [{"id": ...}]}: the body's object, the array, a candidate


@njit(cache=True, nogil=True)
def outline_marks(data: np.ndarray, brackets: np.ndarray, out: np.ndarray, max_read: int) -> int:
    """data: uint8 [n_bytes], a body without backslashes; brackets: int64 [n], the offsets of
    its bracket bytes outside strings, ascending; out: int64, receives the brackets and the
    quotes at most three deep, ascending. How many, or -1 when out is short or the bytes read
    between brackets would pass `max_read` (a body of deep strings: every mark serves then)."""
    n = data.shape[0]
    k = 0
    depth = 0
    read = 0
    start = 0  # the first byte after the last bracket
    for i in range(brackets.shape[0] + 1):
        stop = brackets[i] if i < brackets.shape[0] else n
        if depth <= _DEEPEST:
            read += stop - start
            if read > max_read:
                return -1
            for t in range(start, stop):
                if data[t] == _QUOTE:
                    if k == out.shape[0]:
                        return -1
                    out[k] = t
                    k += 1
        if i == brackets.shape[0]:
            break
        if k == out.shape[0]:
            return -1
        out[k] = stop
        k += 1
        byte = data[stop]
        if byte == _OPEN_OBJECT or byte == _OPEN_LIST:  # noqa: SIM109 (plain compares in numba)
            depth += 1
        elif byte == _CLOSE_OBJECT or byte == _CLOSE_LIST:  # noqa: SIM109
            depth -= 1
        start = stop + 1
    return k
