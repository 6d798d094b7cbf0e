"""The one error type for data that cannot be read."""

from __future__ import annotations

from app.errors import LtrError


class DataFormatError(LtrError, ValueError):
    """A data file that cannot be read; the message names the file, the line (or row and
    column) and what is wrong, e.g. `train.txt:12: label 'x' is not a number`."""


def located(path: object, line: int | None, what: str) -> DataFormatError:
    """`<file>:<line>: <what>` (or `<file>: <what>` when no line applies)."""
    where = f"{path}:{line}" if line is not None else f"{path}"
    return DataFormatError(f"{where}: {what}")
