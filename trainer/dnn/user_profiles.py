"""The user-profile table: one row per user, a `user_id` column and profile fields, as CSV (with a
header line) or Parquet."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from app.errors import LtrError

USER_ID_COLUMN = "user_id"


class ProfileTableError(LtrError, ValueError):
    """A profile table that cannot be read; the message names the file (and line)."""


def read_profiles(path: Path) -> dict[str, dict[str, Any]]:
    """user id (as text) → {field: value}. CSV values stay text (numeric fields parse later);
    Parquet values keep their type, null becomes None."""
    path = Path(path)
    if not path.is_file():
        raise ProfileTableError(f"{path}: no such file")
    if path.suffix.lower() in {".parquet", ".pq"}:
        return _read_parquet(path)
    return _read_csv(path)


def _read_csv(path: Path) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    # utf-8-sig: Excel starts a CSV with a byte-order mark, which would glue itself to the
    # first column's name.
    with open(path, newline="", encoding="utf-8-sig") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None or USER_ID_COLUMN not in header:
            raise ProfileTableError(f"{path}: line 1: the header needs a {USER_ID_COLUMN!r} column")
        while True:
            # The row's first line: `line_num` counts the lines read, and a quoted value
            # holding line breaks (an unclosed quote: all the rest of the file) reads several.
            line = reader.line_num + 1
            cells = next(reader, None)
            if cells is None:
                break
            if not cells:
                continue  # a blank line, as csv.DictReader skips it
            if reader.line_num > line:
                raise ProfileTableError(
                    f"{path}: line {line}: a quoted value starting on this line runs on to line "
                    f"{reader.line_num} (an unclosed quote?); profile values cannot hold line "
                    "breaks"
                )
            if len(cells) != len(header):
                raise ProfileTableError(f"{path}: line {line}: wrong number of fields")
            row = dict(zip(header, cells, strict=True))
            user = row.pop(USER_ID_COLUMN).strip()
            if not user:
                raise ProfileTableError(f"{path}: line {line}: empty {USER_ID_COLUMN}")
            if user in out:
                raise ProfileTableError(f"{path}: line {line}: user {user!r} appears twice")
            out[user] = {k: (v if v != "" else None) for k, v in row.items()}
    return out


def _read_parquet(path: Path) -> dict[str, dict[str, Any]]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several unrelated types for a bad file
        raise ProfileTableError(f"{path}: not a readable Parquet file ({exc})") from None
    if USER_ID_COLUMN not in table.column_names:
        raise ProfileTableError(f"{path}: no {USER_ID_COLUMN!r} column")
    columns = table.to_pydict()
    users = columns.pop(USER_ID_COLUMN)
    out: dict[str, dict[str, Any]] = {}
    for row, user in enumerate(users):
        if user is None:
            raise ProfileTableError(f"{path}: row {row}: null {USER_ID_COLUMN}")
        key = str(user)
        if key in out:
            raise ProfileTableError(f"{path}: row {row}: user {key!r} appears twice")
        out[key] = {name: values[row] for name, values in columns.items()}
    return out
