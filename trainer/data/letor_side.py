"""Side files beside a LETOR text file: LightGBM's `<file>.query` group sizes, `<file>.user`
(one user id per query) and `<file>.position` (one served position per row, `N` or `pos_N`)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from trainer.data.errors import located, quote

_POSITION = re.compile(r"(?:pos_)?([0-9]+)")
_COUNT = re.compile(r"[0-9]+")  # not str.isdigit: it takes "²", which int() refuses


def side_path(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def _entries(path: Path) -> list[tuple[int, str]]:
    """(line number, stripped text) of every non-blank line."""
    # utf-8-sig: a byte-order mark is read past, as in the data file (trainer.data.letor).
    text = path.read_text(encoding="utf-8-sig", errors="replace")
    return [(n, s) for n, raw in enumerate(text.splitlines(), start=1) if (s := raw.strip())]


def read_group_sizes(path: Path, n_rows: int) -> np.ndarray:
    """Group sizes int64 [n_queries] from a `.query` file; they must sum to `n_rows`."""
    sizes: list[int] = []
    total = 0
    entries = _entries(path)
    for line, text in entries:
        if not _COUNT.fullmatch(text) or int(text) <= 0:
            raise located(path, line, f"group size {quote(text)} is not a positive integer")
        sizes.append(int(text))
        total += sizes[-1]
        if total > n_rows:
            raise located(path, line, f"group sizes reach {total} but the data has {n_rows} rows")
    if total != n_rows:
        last = entries[-1][0] if entries else 1
        raise located(path, last, f"group sizes sum to {total} but the data has {n_rows} rows")
    return np.asarray(sizes, dtype=np.int64)


def read_user_ids(path: Path, n_queries: int) -> np.ndarray:
    """User ids (str [n_queries]), one line per query."""
    entries = _entries(path)
    if len(entries) != n_queries:
        line = entries[min(len(entries), n_queries) - 1][0] if entries else 1
        raise located(path, line, f"{len(entries)} user ids for {n_queries} queries")
    return np.asarray([text for _, text in entries], dtype=np.str_)


def read_positions(path: Path, n_rows: int) -> np.ndarray:
    """1-based served positions (int64 [n_rows]); lines are `N` or LightGBM's `pos_N`."""
    entries = _entries(path)
    if len(entries) != n_rows:
        line = entries[min(len(entries), n_rows) - 1][0] if entries else 1
        raise located(path, line, f"{len(entries)} positions for {n_rows} rows")
    positions = np.empty(n_rows, dtype=np.int64)
    for row, (line, text) in enumerate(entries):
        match = _POSITION.fullmatch(text)
        if match is None or int(match.group(1)) <= 0:
            raise located(path, line, f"position {quote(text)} is not a positive integer or pos_N")
        positions[row] = int(match.group(1))
    return positions
