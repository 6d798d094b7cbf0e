"""A hash index from item ids to snapshot rows: a thousand-id lookup in a few vectorised passes.

A binary search over a million memory-mapped unicode ids compares strings about twenty times
per id, each on a different page; the index searches the ids' 64-bit hashes instead (sorted,
8 bytes an item, integer comparisons) and checks each hit against the id itself. The hash of an
id is a sum of its code points times per-position odd constants, finished with splitmix64's
mixer (Steele et al. 2014): a zero code point adds nothing, so the hash does not depend on the
width numpy gave the array, and one integer matmul computes it for all ids at once. Ids whose
hashes collide (about one pair in 2**64 / n**2 snapshots) are looked up by binary search over
the sorted ids, so a collision costs time, never a wrong row.
"""

from __future__ import annotations

import numpy as np

from app.features import item_lookup
from app.features.item_lookup import IdTokens

_EMPTY = -1
_MAX_BUCKET_BITS = 28  # 2**28 buckets: 1 GiB of starts at most, for 256M items
# splitmix64's finisher; app.features.item_lookup_kernel hashes with the same constants.
MIX1 = np.uint64(0xBF58476D1CE4E5B9)
MIX2 = np.uint64(0x94D049BB133111EB)


def _position_constants(width: int) -> np.ndarray:
    """uint64 [width]: fixed odd multipliers, the same in every process."""
    rng = np.random.Generator(np.random.PCG64(0x5EED17))
    odd = rng.integers(0, 2**63, size=max(width, 1), dtype=np.uint64) * np.uint64(2)
    return odd + np.uint64(1)


_CONSTANTS = _position_constants(64)


def constants_for(width: int) -> np.ndarray:
    """uint64 [width]: the multipliers of ids `width` code points wide."""
    return (_CONSTANTS if width <= _CONSTANTS.shape[0] else _position_constants(width))[:width]


_CHUNK = 1 << 16  # rows hashed at once: bounds the uint64 copy of the code points


def id_hashes(ids: np.ndarray) -> np.ndarray:
    """uint64 [n] for a unicode array [n] (any width)."""
    n = ids.shape[0]
    width = ids.dtype.itemsize // 4
    if n == 0 or width == 0:
        return np.zeros(n, dtype=np.uint64)
    constants = constants_for(width)
    points = np.ascontiguousarray(ids).view(np.uint32).reshape(n, width)
    h = np.empty(n, dtype=np.uint64)
    for start in range(0, n, _CHUNK):
        # An integer matmul wraps modulo 2**64: the sum of code point x constant, in one pass.
        h[start : start + _CHUNK] = points[start : start + _CHUNK].astype(np.uint64) @ constants
    with np.errstate(over="ignore"):
        h ^= h >> np.uint64(30)
        h *= MIX1
        h ^= h >> np.uint64(27)
        h *= MIX2
        h ^= h >> np.uint64(31)
    return h


class ItemIndex:
    """Row of each id in `ids` (unicode [n], sorted, unique), by hash."""

    def __init__(self, ids: np.ndarray) -> None:
        self.ids = ids
        n = int(ids.shape[0])
        hashes = id_hashes(ids)
        order = np.argsort(hashes, kind="stable")
        self.hashes = hashes[order]  # uint64 [n], sorted
        self.rows_by_hash = order.astype(np.int32 if n < 2**31 else np.int64)
        same = np.flatnonzero(self.hashes[1:] == self.hashes[:-1])
        self.colliding = np.unique(self.hashes[same])  # uint64: hashes shared by two ids
        # A binary search over n hashes is ~log2(n) cache misses per key; the hash's top bits
        # pick a bucket of about one hash instead, whose start a second array holds.
        self.bits = min(max(int(n - 1).bit_length(), 1), _MAX_BUCKET_BITS)
        self.shift = np.uint64(64 - self.bits)
        buckets = (self.hashes >> self.shift).astype(np.int64)
        self.starts = np.searchsorted(buckets, np.arange((1 << self.bits) + 1)).astype(
            self.rows_by_hash.dtype
        )
        # What the compiled lookup reads: the ids' code points (a view, no copy), uint32
        # [n, width], and the hash's multipliers for that width.
        width = ids.dtype.itemsize // 4
        self._points = (
            np.asarray(ids).view(np.uint32).reshape(n, width)
            if width
            else np.zeros((n, 0), dtype=np.uint32)
        )
        self._points.flags.writeable = False  # one type whatever the ids' memory (see below)
        self._constants = np.ascontiguousarray(constants_for(width))

    def token_rows(self, tokens: IdTokens) -> np.ndarray | None:
        """int64 [tokens.count]: rows as `rows` gives them, found from the body's id bytes by
        the compiled kernel; None when it is not ready or declines (use `rows`)."""
        kernel = item_lookup.KERNEL.ready()
        if kernel is None or self._points.shape[1] == 0 or self._points.shape[0] == 0:
            return None
        rows = np.empty(tokens.count, dtype=np.int64)
        # numba compiles a kernel anew for each writable / read-only mix of its arrays (~1 s
        # on a cold cache, in the request that brings it): the bytes and the ids are always
        # passed read-only, the types the kernel is compiled for at load.
        buf = tokens.buf.view()
        buf.flags.writeable = False
        status = kernel.find_rows(
            buf,
            tokens.begin,
            tokens.end,
            tokens.count,
            self._constants,
            self.shift,
            self.starts,
            self.hashes,
            self.rows_by_hash,
            self._points,
            rows,
        )
        return rows if status == item_lookup.OK else None

    def rows(self, keys: np.ndarray) -> np.ndarray:
        """int64 [len(keys)]: each key's row, -1 where absent. `keys`: unicode [m]."""
        m, n = int(keys.shape[0]), int(self.ids.shape[0])
        rows = np.full(m, _EMPTY, dtype=np.int64)
        if m == 0 or n == 0:
            return rows
        h = id_hashes(keys)
        bucket = (h >> self.shift).astype(np.intp)
        at = self.starts[bucket].astype(np.intp)
        end = self.starts[bucket + 1].astype(np.intp)
        pending = np.flatnonzero(at < end)
        while pending.size:  # steps through a bucket's sorted hashes: one or two on average
            here = self.hashes[at[pending]]
            wanted = h[pending]
            matched = pending[here == wanted]
            rows[matched] = self.rows_by_hash[at[matched]]
            onward = pending[here < wanted]
            at[onward] += 1
            pending = onward[at[onward] < end[onward]]
        hit = rows >= 0
        hit[hit] = self.ids[rows[hit]] == keys[hit]
        rows[~hit] = _EMPTY
        if self.colliding.size:
            shared = ~hit & np.isin(h, self.colliding)
            if shared.any():
                found = np.minimum(np.searchsorted(self.ids, keys[shared]), n - 1)
                rows[shared] = np.where(self.ids[found] == keys[shared], found, _EMPTY)
        return rows
