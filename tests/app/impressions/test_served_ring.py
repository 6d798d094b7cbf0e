"""app.impressions.served_ring: spans stay readable until newer bytes overwrite them."""

from __future__ import annotations

from pathlib import Path

from app.impressions.served_ring import ServedRing


def test_spans_read_back_until_overwritten_and_never_split_at_the_wrap() -> None:
    ring = ServedRing(10)
    a = ring.add(b"aaaa")
    b = ring.add(b"bbbb")
    assert a is not None and b is not None
    assert ring.get(a) == b"aaaa" and ring.get(b) == b"bbbb"
    c = ring.add(b"ccc")  # 2 bytes left at the end: written at the start, over a
    assert c is not None
    assert ring.get(c) == b"ccc" and ring.get(b) == b"bbbb"
    assert not ring.holds(a) and ring.get(a) is None
    d = ring.add(b"dddddd")  # over b
    assert d is not None and ring.get(d) == b"dddddd" and ring.get(b) is None
    assert ring.get(c) == b"ccc"


def test_data_larger_than_the_ring_is_not_kept() -> None:
    ring = ServedRing(4)
    assert ring.add(b"12345") is None
    kept = ring.add(b"1234")
    assert kept is not None and ring.get(kept) == b"1234"


def _resident_mb() -> float:
    status = Path("/proc/self/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) / 1024


def test_an_unused_ring_holds_no_memory() -> None:
    """Before: the ring was a bytearray, zero-filled when made: each worker held the 64 MB of
    LTR_IMPRESSIONS_INDEX_MAX_MB resident from its start, impressions enabled or not."""
    before = _resident_mb()
    ring = ServedRing(256 * 2**20)
    span = ring.add(b"abc")
    assert span is not None and ring.get(span) == b"abc"
    assert _resident_mb() - before < 32
