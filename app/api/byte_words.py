"""Byte arrays read and written eight bytes at a time in compiled (numba) code.

numba indexes a uint8 array one byte per access; these intrinsics load or store eight bytes
at any offset as one little-endian uint64 (an unaligned `mov`), and find the first byte of a
word equal to either of two values with byte-wise arithmetic in one register (SWAR: the
"has zero byte" test, `(x - 0x01..) & ~x & 0x80..`, Mycroft 1987, after an xor with the byte
repeated). The caller keeps every access inside its array. Imported by kernels only: numba
is loaded in the background, never at the service's start.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, types  # helpers inline="always": app.numba_jit says why
from numba.extending import intrinsic

LOW_BITS = np.uint64(0x0101010101010101)
HIGH_BITS = np.uint64(0x8080808080808080)
_THREE = np.uint64(3)


def _load_word_typed(typingctx, arr, i):  # type: ignore[no-untyped-def]
    """arr[i:i + 8] as one little-endian uint64."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        array = context.make_array(signature.args[0])(context, builder, value=args[0])
        at = builder.gep(array.data, [args[1]])
        return builder.load(builder.bitcast(at, ir.IntType(64).as_pointer()), align=1)

    return types.uint64(arr, i), codegen


def _store_word_typed(typingctx, arr, i, word):  # type: ignore[no-untyped-def]
    """arr[i:i + 8] = the little-endian bytes of the uint64 `word`."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        array = context.make_array(signature.args[0])(context, builder, value=args[0])
        at = builder.gep(array.data, [args[1]])
        builder.store(args[2], builder.bitcast(at, ir.IntType(64).as_pointer()), align=1)
        return context.get_dummy_value()

    return types.none(arr, i, types.uint64), codegen


def _trailing_zeros_typed(typingctx, x):  # type: ignore[no-untyped-def]
    """The number of trailing zero bits of a non-zero uint64 (`tzcnt`)."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.cttz(args[0], ir.Constant(ir.IntType(1), 0))

    return types.uint64(types.uint64), codegen


# Called from compiled code only, as plain functions (numba's stubs type them otherwise).
load_word: Any = intrinsic(_load_word_typed)
store_word: Any = intrinsic(_store_word_typed)
trailing_zeros: Any = intrinsic(_trailing_zeros_typed)


def repeated(byte: int) -> np.uint64:
    """`byte` in each of a word's eight bytes: the second argument of first_of."""
    return LOW_BITS * np.uint64(byte)


@njit(cache=True, nogil=True, inline="always")
def first_of(array, i, a, b, a_word, b_word):  # type: ignore[no-untyped-def]
    """The first index from i whose byte is a or b, which the caller knows to exist; a_word
    and b_word are `repeated(a)` and `repeated(b)`. A word at a time while eight bytes remain:
    the test's borrow can mark bytes after a match, never before, so the lowest mark is it."""
    n = array.shape[0]
    while i + 8 <= n:
        word = load_word(array, i)
        x = word ^ a_word
        y = word ^ b_word
        hit = (((x - LOW_BITS) & ~x) | ((y - LOW_BITS) & ~y)) & HIGH_BITS
        if hit:
            return i + np.int64(trailing_zeros(hit) >> _THREE)
        i += 8
    while array[i] != a and array[i] != b:
        i += 1
    return i


@njit(cache=True, nogil=True, inline="always")
def copy_bytes(dest, w, src, start, stop):  # type: ignore[no-untyped-def]
    """dest[w:w + stop - start] = src[start:stop], a word at a time while eight remain; the
    new end. Writes no byte outside that range."""
    k = start
    while k + 8 <= stop:
        store_word(dest, w, load_word(src, k))
        w += 8
        k += 8
    while k < stop:
        dest[w] = src[k]
        w += 1
        k += 1
    return w
