"""Writing and verifying a version's item keys: MSET / MGET in batches, pipelined.

A value is compared byte for byte with what was written; a command Redis refuses (out of
memory) becomes one short PushError, never redis-py's dump of the command and its bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from app.errors import LtrError

BATCH = 5_000  # items per MSET / MGET
BATCHES_PER_ROUND_TRIP = 8


class PushError(LtrError, RuntimeError):
    """The new version could not be written or did not read back as written."""


@dataclass(frozen=True)
class PackedItems:
    """A version's keys and their values packed end to end, `width` bytes each."""

    keys: list[str]
    buffer: bytes
    width: int

    def value(self, i: int) -> bytes:
        return self.buffer[i * self.width : (i + 1) * self.width]


def repair(client: redis.Redis, packed: PackedItems) -> int:
    """Verify every key of the live version; rewrite the missing or wrong ones."""
    bad = mismatches(client, packed, range(len(packed.keys)))
    if bad:
        write_items(client, packed, bad)
        still = mismatches(client, packed, bad)
        if still:
            raise PushError(f"item {packed.keys[still[0]]!r} did not read back as written")
    return len(bad)


def write_items(
    client: redis.Redis,
    packed: PackedItems,
    indices: Sequence[int],
    progress: Callable[[int, int], None] | None = None,
    total: int = 0,
) -> None:
    for done, batch in _rounds(indices):
        pipe = client.pipeline(transaction=False)
        for part in batch:
            pipe.mset({packed.keys[i]: packed.value(i) for i in part})
        _execute(pipe)
        if progress is not None:
            progress(done, total)


def mismatches(
    client: redis.Redis,
    packed: PackedItems,
    indices: Sequence[int],
    progress: Callable[[int, int], None] | None = None,
    total: int = 0,
) -> list[int]:
    """The indices whose key is absent or does not hold its value, byte for byte."""
    bad: list[int] = []
    for done, batch in _rounds(indices):
        pipe = client.pipeline(transaction=False)
        for part in batch:
            pipe.mget([packed.keys[i] for i in part])
        for part, values in zip(batch, _execute(pipe), strict=True):
            if isinstance(part, range) and None not in values:
                whole = packed.buffer[part.start * packed.width : part.stop * packed.width]
                if b"".join(values) == whole:
                    continue
            bad.extend(i for i, v in zip(part, values, strict=True) if v != packed.value(i))
        if progress is not None:
            progress(len(indices) + done, total)
    return bad


def _execute(pipe: Any) -> list[Any]:
    """The replies; a command Redis refused (`OOM command not allowed`) as one short error,
    not redis-py's dump of the MSET with its binary values."""
    replies = list(pipe.execute(raise_on_error=False))
    for reply in replies:
        if isinstance(reply, redis.ResponseError):
            raise PushError(refused(reply))
    return replies


def refused(exc: Exception) -> str:
    text = str(exc).rstrip(".")
    if isinstance(exc, redis.exceptions.OutOfMemoryError):  # redis-py strips the "OOM"
        text = f"out of memory ({text})"
    return f"Redis refused a write: {text}"


def _rounds(indices: Sequence[int]) -> Iterator[tuple[int, list[Sequence[int]]]]:
    """(indices done after this round, [batches of indices]) covering `indices`; a batch of a
    range is a range."""
    step = BATCH * BATCHES_PER_ROUND_TRIP
    n = len(indices)
    for start in range(0, n, step):
        stop = min(start + step, n)
        yield stop, [indices[lo : min(lo + BATCH, stop)] for lo in range(start, stop, BATCH)]
