"""The /rerank body's candidates read straight from the raw bytes into float32, compiled (numba).

orjson decodes a 1,000 x 136 body into 136,000 Python floats and their lists, and those are
then copied into float32: together most of what an all-in-request /rerank costs. `_scan` walks
the bytes once instead, writing each feature value into a flat float32 buffer and each id's
JSON text into a list to decode at once, and it runs without the GIL. It reads only the usual
shapes, strictly: a top-level object whose `candidates` is an array of objects with an `id`
(a string, or an integer) and `features` (a list of numbers and nulls, a map of plain ASCII
names to them, null, or absent); a map's names are recorded as offsets for app.api.map_kernel
to place. Anything else (an escaped name, a number it cannot convert exactly, an unknown key,
bad JSON) gives up with a status, and the caller decodes the body with orjson as before, which
also reports what is wrong: the fast path never decides an error.

Numbers: the value float32(correctly rounded float64) is what orjson followed by NumPy's cast
gives. Up to 18 significant digits and |exponent| <= 22 below 2^53 the float64 is exact
(Clinger 1990: one correctly rounded product or quotient of exact operands). Otherwise the
product with a table power of ten is within 3 float64 ulps of the true value, which rounds to
the same float32 unless the value lies within those ulps of a float32 rounding midpoint (the
29 dropped bits near 0x10000000); such a value, like a float32 subnormal, gives up.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, types  # helpers inline="always": app.numba_jit says why
from numba.extending import intrinsic

from app.api.byte_words import HIGH_BITS as _HIGH_BITS
from app.api.byte_words import LOW_BITS as _LOW_BITS
from app.api.byte_words import load_word
from app.numba_jit import nogil_jit

OK, GIVE_UP, TOO_MANY = 0, 1, 2  # the scan's status
NULL, ABSENT = -1, -2  # counts[i] when candidate i has `features: null`, or no `features`
# (raw, values, counts, maps, keys, ids, out); out: [n candidates, candidates' start and end,
# values, id bytes, map entries]
SIGNATURE = types.int64(
    types.Array(types.uint8, 1, "C", readonly=True),  # the body, as np.frombuffer gives it
    types.float32[::1],
    types.int64[::1],
    types.uint8[::1],
    types.int64[::1],
    types.uint8[::1],
    types.int64[::1],
)
# The digit loops' two forms, by the type of the scan's last argument (app.api.body_scan
# picks one per body): digit by digit (None: numba prunes the `form is not None` branches
# before typing them), or eight digits a word where they come in runs (int64). Words cut a
# 17-digit value's cost by a third but slow a short one's by a fifth (the larger loop holds
# fewer values in registers), so each form is compiled on its own: `scan` (digit by digit)
# here, the word form by `compile_word_form` (16 s each cold on a Zen 4 VM, so no probe waits
# for the second: app.kernel_warmup.late_kernels).
SIGNATURES = [
    types.int64(*SIGNATURE.args, types.none),
    types.int64(*SIGNATURE.args, types.int64),
]
POW10_MIN, POW10_MAX = -345, 310
POW10 = np.array([float(f"1e{q}") for q in range(POW10_MIN, POW10_MAX + 1)], dtype=np.float64)

EXACT10 = np.array([10.0**q for q in range(23)], dtype=np.float64)  # exact in float64
KEY_CANDIDATES = np.frombuffer(b"candidates", dtype=np.uint8)
KEY_ID = np.frombuffer(b"id", dtype=np.uint8)
KEY_FEATURES = np.frombuffer(b"features", dtype=np.uint8)
_MIDPOINT, _LOW_MASK, _SLACK = 0x10000000, 0x1FFFFFFF, 16
_F32_MIN_NORMAL = 2.0**-126
_EXACT_MAX = 2**53
_MAX_DIGITS = 18
# Eight ASCII digits at once (the word form), read as one little-endian word: whether all
# eight are digits (byte-wise compares in one register, SWAR), and the number they spell
# (Lemire's eight-digit parse, as fast_float does it). A 17-digit value costs two word reads
# and one byte step instead of 17 byte steps.
_ZEROS, _ABOVE_NINE = _LOW_BITS * np.uint64(0x30), _LOW_BITS * np.uint64(0x46)
_NIBBLES = _LOW_BITS * np.uint64(0x0F)
_PAIRS = np.uint64(0x000000FF000000FF)
_MUL1, _MUL2 = np.uint64(100 + (1000000 << 32)), np.uint64(1 + (10000 << 32))
_LOW32 = np.uint64(0xFFFFFFFF)
_U8, _U16, _U32 = np.uint64(8), np.uint64(16), np.uint64(32)
_TEN = np.uint64(10)
_U64_LOW_MASK = np.uint64(_LOW_MASK)


def _float_bits_typed(typingctx, x):  # type: ignore[no-untyped-def]
    """A float64's bits as a uint64."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.bitcast(args[0], ir.IntType(64))

    return types.uint64(types.float64), codegen


# Called from compiled code only, as plain functions (numba's stubs type them otherwise).
_float_bits: Any = intrinsic(_float_bits_typed)


@njit(cache=True, nogil=True, inline="always")
def _eight_ahead(raw, i, n):  # type: ignore[no-untyped-def]
    """Whether raw[i:i + 8] are all ASCII digits. The eighth byte is looked at first: a
    shorter number ends before it, and then no word is read (a word read and tested for each
    short number cost a 1-digit value 2-4 ns more)."""
    if i + 8 > n or raw[i + 7] < 48 or raw[i + 7] > 57:
        return False
    word = load_word(raw, i)
    below = (word - _ZEROS) & ~word  # the high bit set in a byte below '0'
    above = (word + _ABOVE_NINE) | word  # ... in a byte above '9'
    return ((below | above) & _HIGH_BITS) == 0


@njit(cache=True, nogil=True, inline="always")
def _eight_value(word):  # type: ignore[no-untyped-def]
    """The number a word's eight ASCII digits spell, the first in the lowest byte."""
    v = (word & _NIBBLES) * _TEN + ((word & _NIBBLES) >> _U8)
    v = (v & _PAIRS) * _MUL1 + ((v >> _U16) & _PAIRS) * _MUL2
    return np.int64((v >> _U32) & _LOW32)


@njit(cache=True, nogil=True, inline="always")
def _skip_ws(raw, i):  # type: ignore[no-untyped-def]
    n = raw.shape[0]
    while i < n and (raw[i] == 32 or raw[i] == 10 or raw[i] == 13 or raw[i] == 9):
        i += 1
    return i


@njit(cache=True, nogil=True, inline="always")
def _string_end(raw, i):  # type: ignore[no-untyped-def]
    """raw[i] is an opening quote: the index after its closing quote, or -1."""
    n = raw.shape[0]
    i += 1
    while i < n:
        c = raw[i]
        if c == 34:
            return i + 1
        if c == 92:
            i += 2
            continue
        if c < 32:
            return -1
        i += 1
    return -1


@njit(cache=True, nogil=True, inline="always")
def _value_end(raw, i):  # type: ignore[no-untyped-def]
    """The index after the JSON value at raw[i], found without checking it (orjson checks
    the envelope), or -1."""
    n = raw.shape[0]
    if i >= n:
        return -1
    c = raw[i]
    if c == 34:
        return _string_end(raw, i)
    if c == 123 or c == 91:
        depth = 0
        while i < n:
            c = raw[i]
            if c == 34:
                i = _string_end(raw, i)
                if i < 0:
                    return -1
                continue
            if c == 123 or c == 91:
                depth += 1
            elif c == 125 or c == 93:
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
        return -1
    while i < n:
        c = raw[i]
        if c == 44 or c == 125 or c == 93 or c == 32 or c == 10 or c == 13 or c == 9:
            return i
        i += 1
    return i


@njit(cache=True, nogil=True, inline="always")
def _plain_key(raw, i):  # type: ignore[no-untyped-def]
    """raw[i] is a key's opening quote: the index of its closing quote when the key has no
    escape, else -1."""
    n = raw.shape[0]
    j = i + 1
    while j < n and raw[j] != 34:
        if raw[j] == 92 or raw[j] < 32:
            return -1
        j += 1
    return j if j < n else -1


@njit(cache=True, nogil=True, inline="always")
def _equals(raw, start, stop, word):  # type: ignore[no-untyped-def]
    """Whether raw[start:stop] is `word` (uint8 [length])."""
    if stop - start != word.shape[0]:
        return False
    for t in range(word.shape[0]):  # noqa: SIM110 (numba compiles no generator here)
        if raw[start + t] != word[t]:
            return False
    return True


@njit(cache=True, nogil=True, inline="always")
def _decimal(neg, w, exp10, is_float):  # type: ignore[no-untyped-def]
    """(float32 of the number +-w x 10^exp10, True), or (0, False) for one this path does not
    convert (see the module's docstring)."""
    if w == 0:
        return (np.float32(-0.0) if (neg and is_float) else np.float32(0.0)), True
    if w < _EXACT_MAX and -22 <= exp10 <= 22:
        w64 = np.float64(w)
        d64 = w64 * EXACT10[exp10] if exp10 >= 0 else w64 / EXACT10[-exp10]
    else:
        if exp10 < POW10_MIN or exp10 > POW10_MAX:
            return np.float32(0.0), False
        d64 = np.float64(w) * POW10[exp10 - POW10_MIN]
        a = abs(d64)
        if not (a >= _F32_MIN_NORMAL and a < np.inf):
            return np.float32(0.0), False
        # The low bits of the 53-bit mantissa are the double's low bits (it is normal here).
        low = np.int64(_float_bits(a) & _U64_LOW_MASK)
        if abs(low - _MIDPOINT) <= _SLACK:
            return np.float32(0.0), False
    return np.float32(-d64 if neg else d64), True


@njit(cache=True, nogil=True, inline="always")
def _int_end(raw, i):  # type: ignore[no-untyped-def]
    """raw[i] starts an id: the index after the JSON integer there, or -1 (a fraction or an
    exponent is not an integer id: the full path reports it)."""
    n = raw.shape[0]
    if raw[i] == 45:
        i += 1
    if i >= n or raw[i] < 48 or raw[i] > 57:
        return -1
    if raw[i] == 48:
        i += 1
    else:
        while i < n and 48 <= raw[i] <= 57:
            i += 1
    if i < n and (raw[i] == 46 or raw[i] == 101 or raw[i] == 69 or 48 <= raw[i] <= 57):
        return -1
    return i


@njit(cache=True, nogil=True, inline="always")
def _null_end(raw, i):  # type: ignore[no-untyped-def]
    """raw[i] is `n`: the index after `null`, or -1."""
    if i + 4 > raw.shape[0] or raw[i + 1] != 117 or raw[i + 2] != 108 or raw[i + 3] != 108:
        return -1
    return i + 4


@njit(cache=True, nogil=True, inline="always")
def _features(raw, i, values, nv, keys, nk, is_map, form):  # type: ignore[no-untyped-def]
    """raw[i] is the `[` of a feature list, or (`is_map`) the `{` of a name -> value map:
    (the index after its end or -1, values written). A map's names go to keys[2 (nk + j)]
    and keys[2 (nk + j) + 1] (start and end offsets): plain ASCII only, else -1. Per listed value
    (a Zen 4 VM) ~4 ns, and ~1.5 ns per digit read one by one: `0.1234` 14 ns, a 17-digit
    value 35 ns digit by digit and 23 ns in the word form (`form`, see SIGNATURES); on an Intel
    Xeon VM 14.7 and 31 ns digit by digit, 36 in the word form (app.api.word_form)."""
    n = raw.shape[0]
    close = 125 if is_map else 93
    i += 1
    while i < n and (raw[i] == 32 or raw[i] == 10 or raw[i] == 13 or raw[i] == 9):
        i += 1
    if i < n and raw[i] == close:
        return i + 1, 0
    count = 0
    cap = values.shape[0]
    while i < n:
        if nv + count >= cap:
            return -1, count
        if is_map:
            if raw[i] != 34 or 2 * (nk + count) + 1 >= keys.shape[0]:
                return -1, count
            start = i + 1
            i = start
            while i < n and raw[i] != 34:
                if raw[i] == 92 or raw[i] < 32 or raw[i] >= 128:
                    return -1, count
                i += 1
            if i >= n:
                return -1, count
            keys[2 * (nk + count)] = start
            keys[2 * (nk + count) + 1] = i
            i += 1
            while i < n and (raw[i] == 32 or raw[i] == 10 or raw[i] == 13 or raw[i] == 9):
                i += 1
            if i >= n or raw[i] != 58:
                return -1, count
            i += 1
            while i < n and (raw[i] == 32 or raw[i] == 10 or raw[i] == 13 or raw[i] == 9):
                i += 1
            if i >= n:
                return -1, count
        c = raw[i]
        if c == 110:  # null: a missing value
            if i + 4 > n or raw[i + 1] != 117 or raw[i + 2] != 108 or raw[i + 3] != 108:
                return -1, count
            values[nv + count] = np.nan
            i += 4
        else:
            # A JSON number, strictly: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
            neg = c == 45
            if neg:
                i += 1
            if i >= n or raw[i] < 48 or raw[i] > 57:
                return -1, count
            w = np.int64(0)
            digits = 0
            exp10 = 0
            is_float = False
            dropped = False
            # No digit loop below compares i with n: the body's last byte is not part of a
            # number (_scan checks it), so every run of digits ends inside the body.
            if raw[i] == 48:
                i += 1
                if 48 <= raw[i] <= 57:
                    return -1, count  # a leading zero
            else:
                # (Word form) eight digits a word while they fit in w; then digit by digit.
                if form is not None:
                    while digits <= _MAX_DIGITS - 8 and _eight_ahead(raw, i, n):
                        w = w * 100000000 + _eight_value(load_word(raw, i))
                        digits += 8
                        i += 8
                while 48 <= raw[i] <= 57:
                    if digits < _MAX_DIGITS:
                        w = w * 10 + (raw[i] - 48)
                        digits += 1
                    else:
                        exp10 += 1  # past the 18th digit: only zeros are exact
                        dropped = dropped or raw[i] != 48
                    i += 1
            if raw[i] == 46:
                is_float = True
                i += 1
                if raw[i] < 48 or raw[i] > 57:
                    return -1, count
                # (Word form) leading zeros only scale; then eight digits a word while they
                # fit in w (the first, if w is still 0, a digit 1-9); then digit by digit.
                if form is not None:
                    while w == 0 and raw[i] == 48:
                        exp10 -= 1
                        i += 1
                    while digits <= _MAX_DIGITS - 8 and _eight_ahead(raw, i, n):
                        w = w * 100000000 + _eight_value(load_word(raw, i))
                        digits += 8
                        exp10 -= 8
                        i += 8
                while 48 <= raw[i] <= 57:
                    if w == 0 and raw[i] == 48:
                        exp10 -= 1
                    elif digits < _MAX_DIGITS:
                        w = w * 10 + (raw[i] - 48)
                        digits += 1
                        exp10 -= 1
                    else:
                        dropped = dropped or raw[i] != 48
                    i += 1
            if raw[i] == 101 or raw[i] == 69:
                is_float = True
                i += 1
                exp_neg = False
                if raw[i] == 43 or raw[i] == 45:
                    exp_neg = raw[i] == 45
                    i += 1
                if raw[i] < 48 or raw[i] > 57:
                    return -1, count
                e = 0
                while 48 <= raw[i] <= 57:
                    if e < 100000:
                        e = e * 10 + (raw[i] - 48)
                    i += 1
                exp10 += -e if exp_neg else e
            if dropped:
                return -1, count
            value, ok = _decimal(neg, w, exp10, is_float)
            if not ok:
                return -1, count
            values[nv + count] = value
        count += 1
        while i < n and (raw[i] == 32 or raw[i] == 10 or raw[i] == 13 or raw[i] == 9):
            i += 1
        if i >= n:
            return -1, count
        if raw[i] == 44:
            i += 1
            while i < n and (raw[i] == 32 or raw[i] == 10 or raw[i] == 13 or raw[i] == 9):
                i += 1
        elif raw[i] == close:
            return i + 1, count
        else:
            return -1, count
    return -1, count


@njit(cache=True, nogil=True, inline="always")
def _separator(raw, i, close):  # type: ignore[no-untyped-def]
    """After a value at raw[i:]: (the next member's index, False) after a comma, (the index
    after `close`, True), or (-1, False)."""
    i = _skip_ws(raw, i)
    if i >= raw.shape[0]:
        return -1, False
    if raw[i] == 44:
        return _skip_ws(raw, i + 1), False
    if raw[i] == close:
        return i + 1, True
    return -1, False


@njit(cache=True, nogil=True, inline="always")
def _candidates(raw, i, values, counts, maps, keys, ids, out, form):  # type: ignore[no-untyped-def]
    """raw[i] is the `[` of `candidates`: the index after its `]`, -1 to give up, or -2 when
    there are more candidates than `counts` has room for."""
    n = raw.shape[0]
    rows = 0
    nv = 0
    nk = 0
    nid = 0
    i = _skip_ws(raw, i + 1)
    if i < n and raw[i] == 93:
        out[0] = 0
        out[3] = 0
        out[4] = 0
        out[5] = 0
        return i + 1
    while True:
        if i >= n or raw[i] != 123:
            return -1
        if rows >= counts.shape[0]:
            return -2
        counts[rows] = ABSENT
        maps[rows] = 0
        has_id = False
        has_features = False
        i = _skip_ws(raw, i + 1)
        while True:
            if i >= n or raw[i] != 34:
                return -1
            key_end = _plain_key(raw, i)
            if key_end < 0:
                return -1
            is_id = _equals(raw, i + 1, key_end, KEY_ID)
            if is_id:
                if has_id:
                    return -1
                has_id = True
            elif _equals(raw, i + 1, key_end, KEY_FEATURES):
                if has_features:
                    return -1
                has_features = True
            else:
                return -1
            i = _skip_ws(raw, key_end + 1)
            if i >= n or raw[i] != 58:
                return -1
            i = _skip_ws(raw, i + 1)
            if i >= n:
                return -1
            c = raw[i]
            if is_id:
                if c == 34:
                    end = _string_end(raw, i)
                elif c == 45 or 48 <= c <= 57:
                    end = _int_end(raw, i)
                else:
                    return -1
                if end < 0:
                    return -1
                for t in range(i, end):
                    ids[nid] = raw[t]
                    nid += 1
                ids[nid] = 44
                nid += 1
                i = end
            elif c == 110:
                i = _null_end(raw, i)
                counts[rows] = NULL
            elif c == 91 or c == 123:
                is_map = c == 123
                i, count = _features(raw, i, values, nv, keys, nk, is_map, form)
                nv += count
                counts[rows] = count
                if is_map:
                    maps[rows] = 1
                    nk += count
            else:
                return -1
            if i < 0:
                return -1
            i, closed = _separator(raw, i, 125)
            if i < 0:
                return -1
            if closed:
                break
        if not has_id:
            return -1
        rows += 1
        i, closed = _separator(raw, i, 93)
        if i < 0:
            return -1
        if closed:
            out[0] = rows
            out[3] = nv
            out[4] = nid
            out[5] = nk
            return i


def _scan(raw, values, counts, maps, keys, ids, out, form):  # type: ignore[no-untyped-def]
    """OK with out = [candidates, the candidates array's start and end offsets, values
    written, id bytes written, map entries]; GIVE_UP or TOO_MANY. Fills values (float32
    [>= every feature value]: each candidate's list or map in turn), counts (int64
    [>= candidates]: its list's or map's length, NULL or ABSENT), maps (uint8, the same: 1 for
    a map), keys (int64 [2 x map entries]: each map name's start and end offsets) and ids
    (uint8 [>= len(raw) + 1]: each id's JSON text and a comma). `form`: how digits are read
    (SIGNATURES); the values are the same either way."""
    n = raw.shape[0]
    # A body ends in `}` or whitespace, so no number runs to its end: _features's digit loops
    # stop at a byte of the body without comparing their index with its length (5-12 % less
    # per value, one process, Xeon VM).
    if n == 0 or not (raw[n - 1] == 125 or raw[n - 1] <= 32):
        return GIVE_UP
    i = _skip_ws(raw, 0)
    if i >= n or raw[i] != 123:
        return GIVE_UP
    i = _skip_ws(raw, i + 1)
    found = False
    while True:
        if i >= n or raw[i] != 34:
            return GIVE_UP
        key_end = _plain_key(raw, i)
        if key_end < 0:
            return GIVE_UP
        is_candidates = _equals(raw, i + 1, key_end, KEY_CANDIDATES)
        i = _skip_ws(raw, key_end + 1)
        if i >= n or raw[i] != 58:
            return GIVE_UP
        i = _skip_ws(raw, i + 1)
        if is_candidates:
            if found or i >= n or raw[i] != 91:
                return GIVE_UP
            found = True
            out[1] = i
            i = _candidates(raw, i, values, counts, maps, keys, ids, out, form)
            if i == -2:
                return TOO_MANY
            out[2] = i
        else:
            i = _value_end(raw, i)
        if i < 0:
            return GIVE_UP
        i, closed = _separator(raw, i, 125)
        if i < 0:
            return GIVE_UP
        if closed:
            break
    if _skip_ws(raw, i) != n or not found:
        return GIVE_UP
    return OK


scan = nogil_jit(_scan, SIGNATURES[0])


def compile_word_form() -> Any:
    """The scan in its word form (SIGNATURES[1]), compiled or loaded from numba's cache."""
    return nogil_jit(_scan, SIGNATURES[1])
