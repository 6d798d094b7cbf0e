"""The shed path's candidate ids, compiled (numba): one pass over a body's structural bytes.

`retrieval_order.split_candidates` finds every quote and bracket of a body with vectorised
numpy (a few passes at memory speed); what it then did with those ~10,000 positions took
about 40 numpy calls, 0.45 ms of a 1,000-candidate body. This kernel walks the same positions
once: string boundaries, depth, the top-level `candidates` array, its object elements and
their `id` values, which it copies into one JSON array for orjson. 20-30 us.

It declines (FAIL) wherever the vectorised path declines or could be wrong: the caller then
decodes the body whole, which also reports what is wrong.
"""

from __future__ import annotations

import numpy as np
from numba import njit  # helpers inline="always": app.numba_jit says why

from app.api.answer_kernel import put_digits
from app.api.byte_words import copy_bytes

OK, FAIL = 0, 1
# Positions in `result`: ids found, bytes written to `out`, the array's `[` and `]`.
N_IDS, OUT_LEN, ARRAY_OPEN, ARRAY_CLOSE = 0, 1, 2, 3

_QUOTE, _COMMA, _COLON, _MINUS = 34, 44, 58, 45
_OPEN_OBJECT, _OPEN_LIST, _CLOSE_OBJECT, _CLOSE_LIST = 123, 91, 125, 93
_CANDIDATES = np.frombuffer(b"candidates", dtype=np.uint8)


@njit(cache=True, nogil=True, inline="always")
def _is_space(byte: int) -> bool:
    return byte == 32 or byte == 9 or byte == 10 or byte == 13


@njit(cache=True, nogil=True, inline="always")
def _next_solid(data: np.ndarray, i: int) -> int:
    """The first byte at or after `i` that is not JSON whitespace (len(data) if none)."""
    n = data.shape[0]
    while i < n and _is_space(data[i]):
        i += 1
    return i


@njit(cache=True, nogil=True, inline="always")
def _previous_solid(data: np.ndarray, i: int) -> int:
    """The last byte at or before `i` that is not JSON whitespace (-1 if none)."""
    while i >= 0 and _is_space(data[i]):
        i -= 1
    return i


@njit(cache=True, nogil=True, inline="always")
def _copy(data: np.ndarray, start: int, stop: int, out: np.ndarray, w: int, first: bool) -> int:
    """Appends data[start:stop] to out at w (after a comma unless first); the new end."""
    if not first:
        out[w] = _COMMA
        w += 1
    for k in range(start, stop):
        out[w] = data[k]
        w += 1
    return w


@njit(cache=True, nogil=True, inline="always")
def _is_candidates(data: np.ndarray, start: int, stop: int) -> bool:
    """Whether the string data[start..stop] (its quotes included) is "candidates"."""
    if stop - start != _CANDIDATES.shape[0] + 1:
        return False
    for k in range(_CANDIDATES.shape[0]):  # noqa: SIM110 (numba compiles no generator here)
        if data[start + 1 + k] != _CANDIDATES[k]:
            return False
    return True


@njit(cache=True, nogil=True, inline="always")
def _followed_by(data: np.ndarray, q: int, rest: np.ndarray) -> bool:
    if q + rest.shape[0] >= data.shape[0]:
        return False
    for j in range(rest.shape[0]):  # noqa: SIM110 (numba compiles no generator here)
        if data[q + 1 + j] != rest[j]:
            return False
    return True


_ONES = np.uint64(0x0101010101010101)
_HIGHS = np.uint64(0x8080808080808080)
_QUOTES = np.uint64(0x2222222222222222)
_BRACKET_MASKS = np.uint64(0xD9D9D9D9D9D9D9D9)
_BRACKET_BITS = np.uint64(0x5959595959595959)


@njit(cache=True, nogil=True, inline="always")
def _is_mark(byte: int) -> bool:
    """A quote, or a byte equal to 0x59 under the mask 0xD9: [ ] { } Y _ y DEL."""
    return byte == _QUOTE or (byte & 0xD9) == 0x59


# Without the GIL, as the vector pass it stands in for (app.api.marks_kernel says why).
@njit(cache=True, nogil=True)
def find_marks(data: np.ndarray, out: np.ndarray) -> int:
    """app.api.body_marks.BodyMarks.of's marks: the offsets of data's (uint8 [n_bytes]) quotes
    and brackets, ascending, written to out (int64); how many, or -1 when out is too short.
    Eight bytes at a time: a word without any such byte (most of a body: numbers and names) is
    passed by a few integer operations (the "has a zero byte" test on the word xor'ed with the
    byte sought)."""
    n = data.shape[0]
    whole = n - n % 8
    words = data[:whole].view(np.uint64)
    k = 0
    for w in range(words.shape[0]):
        x = words[w]
        quotes = x ^ _QUOTES
        brackets = (x & _BRACKET_MASKS) ^ _BRACKET_BITS
        if ((quotes - _ONES) & ~quotes & _HIGHS) | ((brackets - _ONES) & ~brackets & _HIGHS):
            for i in range(w * 8, w * 8 + 8):
                if _is_mark(data[i]):
                    if k == out.shape[0]:
                        return -1
                    out[k] = i
                    k += 1
    for i in range(whole, n):
        if _is_mark(data[i]):
            if k == out.shape[0]:
                return -1
            out[k] = i
            k += 1
    return k


_ID_KEY = np.frombuffer(b'id"', dtype=np.uint8)
_FEATURES_KEY = np.frombuffer(b'features"', dtype=np.uint8)
_ROW_DEPTH = 3  # {"candidates": [{"id": ...}]}: the body's object, the array, a candidate


@njit(cache=True, nogil=True)
def count_rows(data: np.ndarray, marks: np.ndarray) -> int:
    """app.api.body_marks.estimated_rows in one pass over the marks: the strings `id` or
    `features` (whichever more) three containers deep, where the candidates are in
    {"candidates": [{"id": ...}]} (the user's `id` is not one); where there are none or the
    quotes and brackets do not balance, anywhere (a second pass); at least 1."""
    rows = rows_three_deep(data, marks)
    return rows if rows > 0 else _keys_anywhere(data, marks)


@njit(cache=True, nogil=True)
def rows_three_deep(data: np.ndarray, marks: np.ndarray) -> int:
    """count_rows' first pass: the strings `id` or `features` (whichever more) three deep, or
    0 when there are none or the quotes and brackets do not balance. It reads only the quotes
    at most three deep, so it gives the same over a body's outline (app.api.outline_kernel)."""
    ids_in_rows = 0
    features_in_rows = 0
    depth = 0
    in_string = False
    for j in range(marks.shape[0]):
        q = marks[j]
        byte = data[q]
        if byte == _QUOTE:
            in_string = not in_string
            # Only an opening quote three deep is looked at: a body of named features has
            # ~50 strings per candidate, all deeper (this pass took half the time it did
            # when every quote was matched against both keys).
            if in_string and depth == _ROW_DEPTH:
                if _followed_by(data, q, _ID_KEY):
                    ids_in_rows += 1
                elif _followed_by(data, q, _FEATURES_KEY):
                    features_in_rows += 1
        elif not in_string:
            if byte == _OPEN_OBJECT or byte == _OPEN_LIST:  # noqa: SIM109 (numba)
                depth += 1
            elif byte == _CLOSE_OBJECT or byte == _CLOSE_LIST:  # noqa: SIM109 (numba)
                depth -= 1
    if depth != 0 or in_string:
        return 0
    return max(ids_in_rows, features_in_rows)


@njit(cache=True, nogil=True, inline="always")
def _keys_anywhere(data: np.ndarray, marks: np.ndarray) -> int:
    """The strings `id` or `features` (whichever more) at any depth; at least 1."""
    ids = 0
    features = 0
    for j in range(marks.shape[0]):
        q = marks[j]
        if data[q] == _QUOTE:
            if _followed_by(data, q, _ID_KEY):
                ids += 1
            elif _followed_by(data, q, _FEATURES_KEY):
                features += 1
    return max(ids, features, 1)


@njit(cache=True, nogil=True, inline="always")
def _container_end(data: np.ndarray, marks: np.ndarray, j: int) -> int:
    """The index in `marks` of the bracket that closes the one at marks[j], or -1, also when
    a bracket inside closes another kind (`[1}`) or they nest past 63 deep: such a body goes
    to the parser, whose error it gets, shed or not."""
    objects = np.uint64(1 if data[marks[j]] == _OPEN_OBJECT else 0)  # a bit per level, 1: {
    depth = 1
    in_string = False
    for k in range(j + 1, marks.shape[0]):
        byte = data[marks[k]]
        if byte == _QUOTE:
            in_string = not in_string
        elif not in_string:
            if byte == _OPEN_OBJECT or byte == _OPEN_LIST:  # noqa: SIM109 (numba)
                if depth == 63:
                    return -1
                objects = (objects << np.uint64(1)) | np.uint64(byte == _OPEN_OBJECT)
                depth += 1
            elif byte == _CLOSE_OBJECT or byte == _CLOSE_LIST:  # noqa: SIM109 (numba)
                if (objects & np.uint64(1)) != np.uint64(byte == _CLOSE_OBJECT):
                    return -1
                objects >>= np.uint64(1)
                depth -= 1
                if depth == 0:
                    return k
    return -1


@njit(cache=True, nogil=True)
def scan_ids(
    data: np.ndarray, marks: np.ndarray, out: np.ndarray, starts: np.ndarray, result: np.ndarray
) -> int:
    """data: uint8 [n_bytes] of a body without backslashes (so quotes pair up); marks: int64
    [n_marks], the offsets of its quotes and of the bytes that may be brackets, ascending;
    out: uint8 [>= n_bytes + 2], receives `[id,id,...]`; starts: int64 [max ids], receives
    where each id begins in `out` (FAIL past that many); result: int64 [4] (N_IDS, OUT_LEN,
    ARRAY_OPEN, ARRAY_CLOSE). OK or FAIL. An id's bytes are copied as they are, so they are
    what orjson writes for the value they decode to (no escapes; "-0" is declined)."""
    n = data.shape[0]
    depth = 0
    in_string = False
    start = 0  # the open quote of the current string
    array_open = -1
    array_close = -1
    inside = False  # within the candidates array
    ids_here = 0  # `id` keys in the current element
    string_id = False  # the next string is an id value
    n_ids = 0
    out[0] = _OPEN_LIST
    w = 1
    n_marks = marks.shape[0]
    j = -1
    while j + 1 < n_marks:
        j += 1
        p = marks[j]
        byte = data[p]
        if byte == _QUOTE:
            if not in_string:
                in_string = True
                start = p
                continue
            in_string = False
            if string_id:
                if n_ids >= starts.shape[0]:
                    return FAIL
                starts[n_ids] = w if n_ids == 0 else w + 1
                w = _copy(data, start, p + 1, out, w, n_ids == 0)
                n_ids += 1
                string_id = False
            elif inside:
                if depth == 2:
                    return FAIL  # a string element
                if (
                    depth == 3
                    and p - start == 3
                    and data[start + 1] == 105
                    and data[start + 2] == 100
                ):
                    colon = _next_solid(data, p + 1)
                    if colon >= n or data[colon] != _COLON:
                        return FAIL  # "id" as a value
                    ids_here += 1
                    if ids_here > 1:
                        return FAIL
                    value = _next_solid(data, colon + 1)
                    if value >= n:
                        return FAIL
                    if data[value] == _QUOTE:
                        string_id = True
                        continue
                    end = value + 1 if data[value] == _MINUS else value
                    while end < n and 48 <= data[end] <= 57:
                        end += 1
                    after = _next_solid(data, end)
                    if end == value or after >= n:
                        return FAIL
                    if data[after] != _COMMA and data[after] != _CLOSE_OBJECT:
                        return FAIL  # not an integer (1.5, 1e3, null, true, ...)
                    if end - value == 2 and data[value] == _MINUS and data[value + 1] == 48:
                        return FAIL  # -0: orjson writes 0
                    if n_ids >= starts.shape[0]:
                        return FAIL
                    starts[n_ids] = w if n_ids == 0 else w + 1
                    w = _copy(data, value, end, out, w, n_ids == 0)
                    n_ids += 1
            elif depth == 1 and _is_candidates(data, start, p):
                colon = _next_solid(data, p + 1)
                if colon < n and data[colon] == _COLON:
                    if array_open >= 0:
                        return FAIL  # a repeated key: the parser decides
                    value = _next_solid(data, colon + 1)
                    if value >= n or data[value] != _OPEN_LIST:
                        return FAIL
                    array_open = value
            continue
        if in_string:
            continue
        if byte == _OPEN_OBJECT or byte == _OPEN_LIST:  # noqa: SIM109 (plain compares in numba)
            if inside and depth == 2:
                if byte == _OPEN_LIST:
                    return FAIL  # an element that is a list
                before = _previous_solid(data, p - 1)
                if before != array_open:
                    if data[before] != _COMMA:
                        return FAIL
                    element = _previous_solid(data, before - 1)
                    if element <= array_open or data[element] != _CLOSE_OBJECT:
                        return FAIL  # something other than objects between the commas
                ids_here = 0
            elif p == array_open:
                inside = True
            elif inside and depth == 3:
                # A candidate's features (or another value in it): nothing in there is an id
                # or the array's end, so only its strings and brackets are followed, to its
                # close (a body of named features has ~50 strings per candidate in there).
                j = _container_end(data, marks, j)
                if j < 0:
                    return FAIL
                continue
            depth += 1
        elif byte == _CLOSE_OBJECT or byte == _CLOSE_LIST:  # noqa: SIM109
            depth -= 1
            if depth < 0:
                return FAIL
            if inside and depth == 2 and (byte != _CLOSE_OBJECT or ids_here != 1 or string_id):
                return FAIL  # an element without exactly one `id` (or a mismatched bracket)
            if inside and depth == 1:
                before = _previous_solid(data, p - 1)
                if byte != _CLOSE_LIST or (before != array_open and data[before] != _CLOSE_OBJECT):
                    return FAIL
                inside = False
                array_close = p
    if in_string or array_close < 0:
        return FAIL
    out[w] = _CLOSE_LIST
    result[N_IDS] = n_ids
    result[OUT_LEN] = w + 1
    result[ARRAY_OPEN] = array_open
    result[ARRAY_CLOSE] = array_close
    return OK


_RESULT_HEAD = np.frombuffer(b'{"id":', dtype=np.uint8)
_RESULT_MIDDLE = np.frombuffer(b',"score":null,"rank":', dtype=np.uint8)


@njit(cache=True, nogil=True)
def write_results(
    out: np.ndarray, starts: np.ndarray, n_ids: int, out_len: int, k: int, dest: np.ndarray
) -> int:
    """The first `k` results of a shed answer, `{"id":ID,"score":null,"rank":R}` joined by
    commas, into dest (uint8, >= out_len + 40 k bytes); their length. out, starts, n_ids,
    out_len: scan_ids' (an id ends at the comma before the next one, the last at `]`)."""
    w = 0
    digits = np.empty(20, dtype=np.uint8)
    for i in range(k):
        if i:
            dest[w] = _COMMA
            w += 1
        w = copy_bytes(dest, w, _RESULT_HEAD, 0, _RESULT_HEAD.shape[0])
        stop = starts[i + 1] - 1 if i + 1 < n_ids else out_len - 1
        w = copy_bytes(dest, w, out, starts[i], stop)
        w = copy_bytes(dest, w, _RESULT_MIDDLE, 0, _RESULT_MIDDLE.shape[0])
        w = put_digits(dest, w, i + 1, digits)
        dest[w] = _CLOSE_OBJECT
        w += 1
    return w
