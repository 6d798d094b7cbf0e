"""app.api.body_marks' pass over a raw body in vector code: 32 bytes per step.

Every request's body is scanned once for its quotes and brackets before admission (a 954 KB
body of 1,000 candidates x 136 features holds ~10,000 of them). numba's pass tests eight bytes
per 64-bit word; here LLVM IR compares 32 bytes at once (two AVX2 or SSE registers), turns the
comparison into a 32-bit mask and writes the offset of each set bit: on a 2-core Zen 1 machine
105 us against 228 us for that body, in one process (the difference doubles in a loaded
server, where the body arrives cold). Compiled with llvmlite (numba's own code generator) by
the background kernel that compiles the shed path; where that fails, numba's pass serves.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import numpy as np

from app.scoring.compiler.jit import CompiledModule, emit_objects

WIDTH = 32  # bytes per step; the mask is one i32
_NAME = "ltr_find_marks"
_STRUCTURE = "ltr_find_structure"
_QUOTE, _BRACKET_MASK, _BRACKET_BITS = 34, 0xD9, 0x59  # as app.api.body_marks
_BACKSLASH = 92


def _splat(byte: int) -> str:
    signed = byte - 256 if byte > 127 else byte
    return "<" + ", ".join(f"i8 {signed}" for _ in range(WIDTH)) + ">"


def _pass_ir(name: str, params: str, entry: str, state: str, block: str, exit_value: str) -> str:
    """A pass that loads WIDTH bytes per step, computes their mask `%bits` (i32) in `block`
    and writes the offset of each set bit to `out` (-1 past `cap`). `params`: arguments after
    %data, %blocks, %out, %cap; `entry`: lines before the loop; `state`: phi lines carried
    from block to block (from `%entry` and `%next`); `exit_value`: the lines before `ret`,
    ending with the returned i64 as %result."""
    v = f"<{WIDTH} x i8>"
    return f"""
declare i32 @llvm.cttz.i32(i32, i1)

define i64 @{name}(ptr noalias readonly %data, i64 %blocks, ptr noalias %out, i64 %cap{
        params
    }) nounwind {{
entry:
{entry}
  br label %loop
loop:
  %b = phi i64 [0, %entry], [%b.next, %next]
  %k = phi i64 [0, %entry], [%k.block, %next]
{state}
  %done = icmp uge i64 %b, %blocks
  br i1 %done, label %exit, label %block
block:
  %off = mul i64 %b, {WIDTH}
  %p = getelementptr inbounds i8, ptr %data, i64 %off
  %bytes = load {v}, ptr %p, align 1
  %quote = icmp eq {v} %bytes, {_splat(_QUOTE)}
  %masked = and {v} %bytes, {_splat(_BRACKET_MASK)}
  %bracket = icmp eq {v} %masked, {_splat(_BRACKET_BITS)}
{block}
  br label %bit
bit:
  %mask = phi i32 [%bits, %block], [%mask.next, %store]
  %kk = phi i64 [%k, %block], [%kk.next, %store]
  %empty = icmp eq i32 %mask, 0
  br i1 %empty, label %next, label %room
room:
  %full = icmp uge i64 %kk, %cap
  br i1 %full, label %overflow, label %store
store:
  %low = call i32 @llvm.cttz.i32(i32 %mask, i1 true)
  %low64 = zext i32 %low to i64
  %at = add i64 %off, %low64
  %slot = getelementptr inbounds i64, ptr %out, i64 %kk
  store i64 %at, ptr %slot, align 8
  %kk.next = add i64 %kk, 1
  %less = sub i32 %mask, 1
  %mask.next = and i32 %mask, %less
  br label %bit
next:
  %k.block = phi i64 [%kk, %bit]
  %b.next = add i64 %b, 1
  br label %loop
overflow:
  ret i64 -1
exit:
{exit_value}
  ret i64 %result
}}
"""


def ir() -> str:
    """`i64 ltr_find_marks(ptr data, i64 blocks, ptr out, i64 capacity)`: the offsets of the
    marks in the first `blocks` * WIDTH bytes, ascending, into `out`; how many, or -1 past
    `capacity`."""
    block = f"""  %mark = or <{WIDTH} x i1> %quote, %bracket
  %bits = bitcast <{WIDTH} x i1> %mark to i32"""
    return _pass_ir(_NAME, "", "", "", block, "  %result = add i64 %k, 0")


# Both passes give the GIL up (CFUNCTYPE). They run on the event loop's thread for every large
# /rerank body (admission's row count, a shed answer's ids), and under overload the request
# threads' decodes and scorings wait for the GIL between their native calls: at 3x on one
# worker (1,000-candidate bodies; the loop's thread 0.9 busy, ~0.45 of a core idle), 88 req/s
# were scored within budget with both holding it, 103 with the structure pass giving it up (7
# alternating pairs) and 113 with both (4 pairs), and a third as many answers came past
# budget + 20 ms (BENCHMARKS.md). Taking it back costs the loop at most a switch interval
# (LTR_GIL_SWITCH_INTERVAL_MS) per pass; the numpy passes these replaced gave it up five times
# per body.
_ENTRY = ctypes.CFUNCTYPE(
    ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64
)


def _blocks_then_tail(
    call: Callable[[int, int, int, int], int], data: np.ndarray, out: np.ndarray
) -> int:
    """Runs a pass, `call(data pointer, blocks, out pointer, capacity)`, over data's whole
    blocks, then over its last < WIDTH bytes zero-padded to one block (a zero byte is no
    mark), their offsets moved to where they are in data: how many in all, or the pass's
    negative code."""
    n = data.shape[0]
    blocks = n // WIDTH
    capacity = out.shape[0]
    k = int(call(data.ctypes.data, blocks, out.ctypes.data, capacity))
    start = blocks * WIDTH
    if k < 0 or start == n:
        return k
    tail = np.zeros(WIDTH, dtype=np.uint8)
    tail[: n - start] = data[start:]
    more = int(call(tail.ctypes.data, 1, out.ctypes.data + k * out.itemsize, capacity - k))
    if more < 0:
        return more
    out[k : k + more] += start
    return k + more


def compile_find_marks() -> Callable[[np.ndarray, np.ndarray], int]:
    """`find_marks(data, out)` as app.api.ids_kernel.find_marks: the offsets of the quotes and
    brackets of data (uint8 [n_bytes]) into out (int64), how many, or -1 when out is short."""
    module = CompiledModule(emit_objects([ir()]))
    entry = _ENTRY(module.address(_NAME))

    def find_marks(data: np.ndarray, out: np.ndarray) -> int:
        return _blocks_then_tail(entry, data, out)

    find_marks.module = module  # type: ignore[attr-defined]  # the code lives as long as it
    return find_marks


def structure_ir() -> str:
    """`i64 ltr_find_structure(ptr data, i64 blocks, ptr out, i64 capacity, ptr carry)`: the
    offsets of the bracket bytes outside strings in the first `blocks` * WIDTH bytes,
    ascending, into `out`; how many, -1 past `capacity`, or -3 when there is a backslash (an
    escaped quote would not pair up). `carry` (i32): -1 when the bytes before are inside a
    string, else 0; updated. Which bytes are inside a string is the running parity of the
    quotes, a prefix xor of the block's quote mask (five shifts), as simdjson finds it
    (Langdale and Lemire 2019)."""
    v = f"<{WIDTH} x i8>"
    lines = [
        f"  %q = bitcast <{WIDTH} x i1> %quote to i32",
        f"  %br = bitcast <{WIDTH} x i1> %bracket to i32",
        f"  %slash = icmp eq {v} %bytes, {_splat(_BACKSLASH)}",
        f"  %sl = bitcast <{WIDTH} x i1> %slash to i32",
        "  %esc.next = or i32 %esc, %sl",
    ]
    last = "%q"
    for step in (1, 2, 4, 8, 16):
        lines.append(f"  %s{step} = shl i32 {last}, {step}")
        lines.append(f"  %x{step} = xor i32 {last}, %s{step}")
        last = f"%x{step}"
    lines += [
        "  %inside = xor i32 %x16, %c",
        "  %c.next = ashr i32 %inside, 31",
        "  %outside = xor i32 %inside, -1",
        "  %bits = and i32 %br, %outside",
    ]
    state = """  %c = phi i32 [%c0, %entry], [%c.next, %next]
  %esc = phi i32 [0, %entry], [%esc.next, %next]"""
    exit_value = """  store i32 %c, ptr %carry, align 4
  %escaped = icmp ne i32 %esc, 0
  %result = select i1 %escaped, i64 -3, i64 %k"""
    entry = "  %c0 = load i32, ptr %carry, align 4"
    params = ", ptr noalias %carry"
    return _pass_ir(_STRUCTURE, params, entry, state, "\n".join(lines), exit_value)


_STRUCTURE_ENTRY = ctypes.CFUNCTYPE(
    ctypes.c_int64,
    ctypes.c_void_p,
    ctypes.c_int64,
    ctypes.c_void_p,
    ctypes.c_int64,
    ctypes.c_void_p,
)


def compile_find_structure() -> Callable[[np.ndarray, np.ndarray], int]:
    """`find_structure(data, out)`: the offsets of the bracket bytes ([ ] { } and the bytes
    that share their bits, Y _ y DEL) outside strings of data (uint8 [n_bytes]) into out
    (int64); how many, -1 when out is short, -2 when the body ends inside a string, -3 when
    it holds a backslash."""
    module = CompiledModule(emit_objects([structure_ir()]))
    entry = _STRUCTURE_ENTRY(module.address(_STRUCTURE))

    def find_structure(data: np.ndarray, out: np.ndarray) -> int:
        carry = ctypes.c_int32(0)  # carried from the whole blocks to the tail
        found = _blocks_then_tail(lambda *args: entry(*args, ctypes.addressof(carry)), data, out)
        return found if found < 0 or carry.value == 0 else -2

    find_structure.module = module  # type: ignore[attr-defined]
    return find_structure
