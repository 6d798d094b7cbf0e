"""The served ids a worker keeps for /feedback, in one ring of bytes allocated once.

Each request's ids were a small bytes object of their own (10-20 bytes an id), allocated
between a request's large transient buffers (its feature matrix, its body): long-lived small
objects scattered through the heap kept its pages from being returned, so 64 MB of them held
1.6 GB of resident memory (a re-check trial: 1,000 short ids a request, 5,600 requests held).
Written into one preallocated ring instead, they cost the ring's size and nothing more: a new
request's ids overwrite the oldest, and an entry whose bytes were overwritten is gone.

The ring is an anonymous memory map, whose pages become resident only as they are written: a
`bytearray` of its size is zero-filled at once, and every worker held its 64 MB resident from
the start, impressions enabled or not.
"""

from __future__ import annotations

import mmap


class ServedRing:
    """`capacity` bytes; `add` gives a span, `get` its bytes while they are not overwritten."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._buffer = mmap.mmap(-1, max(capacity, 1))
        self._end = 0  # bytes ever written (positions are absolute; the ring holds the last)

    def add(self, data: bytes) -> tuple[int, int] | None:
        """Where `data` went (absolute start, length); None if it is larger than the ring."""
        size = len(data)
        if size > self.capacity:
            return None
        at = self._end % self.capacity
        if at + size > self.capacity:  # not split across the wrap: the tail is skipped
            self._end += self.capacity - at
            at = 0
        self._buffer[at : at + size] = data
        start, self._end = self._end, self._end + size
        return start, size

    def holds(self, span: tuple[int, int]) -> bool:
        """Whether `span`'s bytes are still there (not overwritten)."""
        return span[0] >= self._end - self.capacity

    def get(self, span: tuple[int, int]) -> bytes | None:
        """The bytes at `span`, None once they have been overwritten."""
        if not self.holds(span):
            return None
        at = span[0] % self.capacity
        return bytes(self._buffer[at : at + span[1]])
