"""Files given as LETOR text that are something else: said plainly, instead of the first token
the parser trips on (`label '\\x1f\\x8b...' is not a number` for a gzip file)."""

from __future__ import annotations

import re

# Magic bytes → what the file is and what to do with it.
_PACKED = (
    (b"\x1f\x8b", "gzip-compressed: decompress it (gunzip)"),
    (b"BZh", "bzip2-compressed: decompress it (bunzip2)"),
    (b"\xfd7zXZ\x00", "xz-compressed: decompress it (unxz)"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed: decompress it (unzstd)"),
    (b"PK\x03\x04", "a zip archive: extract it"),
)
_MAGIC = (*_PACKED, (b"PAR1", "a Parquet file: name it .parquet or .pq"))


def packed(data: bytes) -> str | None:
    """What compressed or archived file `data` begins, and what to do with it; else None."""
    for magic, what in _PACKED:
        if data.startswith(magic):
            return what
    return None


_ID_VALUE = re.compile(rb"(?:^|\s)\w+:")
_SAMPLE_BYTES = 1 << 16


def not_letor_text(data: bytes) -> str | None:
    """Why `data` is not LETOR text at all, or None when it may be (the parser judges)."""
    for magic, what in _MAGIC:
        if data.startswith(magic):
            return f"{what}; this is not LETOR text"
    head = data[:_SAMPLE_BYTES]
    if b"\n" not in head and b"\r" in head.rstrip():
        # Old Mac line endings: the file reads as one line and fails on its second row.
        return "lines end in CR alone, not LF: convert the line endings to LF (e.g. mac2unix)"
    first = _first_data_line(head)
    if first is not None and b"," in first and not _ID_VALUE.search(first):
        return (
            "looks like CSV (commas, no id:value tokens), not LETOR text: convert it to "
            "Parquet with qid, label and feature columns"
        )
    return None


def _first_data_line(head: bytes) -> bytes | None:
    """The first line with something before its comment (`#`), or None."""
    for raw in head.split(b"\n"):
        line = raw.split(b"#", 1)[0].strip()
        if line:
            return line
    return None
