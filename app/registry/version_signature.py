"""What a version directory looks like on disk, cheaply: enough to tell a repaired copy.

A refused version is not retried by the poll while it stays as it was (every poll would count
a failure and log it again), but a copy repaired in place or removed and published again must
be: its files' inode, size or mtime then differ. Only `stat` calls, no hashing: this runs on the
event loop at every poll of a model whose CURRENT is refused.
"""

from __future__ import annotations

import os
from pathlib import Path

# (name, inode, size, mtime in ns) of the directory (name "") and of each entry, sorted.
VersionSignature = tuple[tuple[str, int, int, int], ...]


def version_signature(path: Path) -> VersionSignature:
    """The directory's and its entries' identity and size; () when it cannot be read (a
    missing version: publishing it makes the signature differ)."""
    try:
        top = os.stat(path)
        entries = [("", top.st_ino, top.st_size, top.st_mtime_ns)]
        with os.scandir(path) as it:
            for entry in it:
                st = entry.stat(follow_symlinks=True)
                entries.append((entry.name, st.st_ino, st.st_size, st.st_mtime_ns))
    except OSError:
        return ()
    return tuple(sorted(entries))


def files_signature(directory: Path, names: list[str]) -> VersionSignature:
    """The identity and size of the named files (a served version's memory-mapped ones): an
    in-place write, or a repair that replaced them, makes it differ."""
    entries = []
    for name in names:
        try:
            st = os.stat(directory / name)
        except OSError:
            entries.append((name, 0, -1, 0))
            continue
        entries.append((name, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(entries)
