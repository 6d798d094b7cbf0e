"""Item rows already read from Redis, kept by each worker for the set version they belong to.

An item set version is immutable (`ltr features push` writes a new version and only then
switches the pointer; versions are content hashes of the table), so a row read once stays
right for as long as that version is live: no TTL, no invalidation beyond the pointer, which
every fetch still reads. A search's candidates repeat across requests (popular items, head
queries), and each row found here is a key Redis does not look up: on a 1M-item set Redis
spends ~2 us of its single thread per key, most of a 1,000-item MGET. Only well-formed rows
are kept: a row Redis lacks or holds malformed may be Redis's loss (eviction, a partial
restart) that pushing the same version again repairs, and a cached absence would outlive it.

Bounded by rows (`LTR_ITEM_ROW_CACHE_ROWS`, 0 = off), oldest written first out: a hit costs one
dict lookup and no bookkeeping, and with skewed traffic the popular rows are read again soon
after they leave. A pointer that moves to another version empties the set's cache.

What it buys (BENCHMARKS.md, 1,000 candidates, 1M items): every row cached, a request 8.85 ms
against 11.47 read from Redis; half of them cached (Zipf traffic), Redis does half the work but
the latency stays (10.37 against 9.97 ms): the smaller fetch already hid behind the body's parse,
and the event loop's own work grew: ~0.3 ms to look up 1,000 ids and ~0.2 ms to keep 470 new
rows (a dict of 50,000 rows on a 2-vCPU VM: each access a cache miss). So it is off by default:
for traffic whose candidates nearly all repeat, or a Redis whose CPU is the limit.
"""

from __future__ import annotations

from itertools import islice

from prometheus_client import Counter

ROWS = Counter(
    "ltr_item_row_cache_rows_total",
    "Item rows Redis item fetches served, by where from (hit: the worker's row cache; miss: "
    "read from Redis).",
    ["outcome"],
)
_HITS, _MISSES = ROWS.labels("hit"), ROWS.labels("miss")


class _Missing:
    """Not in the cache (None is a cached row: the item is absent from the version)."""


MISSING = _Missing()
Row = bytes | None


class ItemRowCache:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._sets: dict[str, tuple[str, dict[str, Row]]] = {}  # set -> (version, id -> row)

    @property
    def enabled(self) -> bool:
        return self.capacity > 0

    def lookup(
        self, set_name: str, version: str, ids: list[str]
    ) -> tuple[list[Row | _Missing], list[int]]:
        """(each id's row or MISSING, the indices of the MISSING ones)."""
        held = self._sets.get(set_name)
        if held is None or held[0] != version:
            return [MISSING] * len(ids), list(range(len(ids)))
        get = held[1].get
        rows = [get(i, MISSING) for i in ids]
        return rows, [j for j, row in enumerate(rows) if row is MISSING]

    def served(self, hits: int, misses: int) -> None:
        """Counts a fetch's rows once it is answered: `hits` from here, `misses` from Redis
        (a lookup under a version the pointer no longer names counts as all misses)."""
        if self.enabled:
            _HITS.inc(hits)
            _MISSES.inc(misses)

    def keep(self, set_name: str, version: str, ids: list[str], rows: list[Row], size: int) -> None:
        """Remembers the rows of `size` bytes just read under `version` (another version's
        rows are dropped)."""
        if not self.enabled or not ids:
            return
        held = self._sets.get(set_name)
        if held is None or held[0] != version:
            held = (version, {})
            self._sets[set_name] = held
        cached = held[1]
        cached.update(
            (i, row) for i, row in zip(ids, rows, strict=True) if row and len(row) == size
        )
        excess = len(cached) - self.capacity
        if excess > 0:  # a plain dict: 0.20 ms for 470 rows in and out, OrderedDict 0.24
            for key in list(islice(cached, excess)):
                del cached[key]

    def __len__(self) -> int:
        return sum(len(rows) for _, rows in self._sets.values())
