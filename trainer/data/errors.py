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


# Ranking metrics and lambdas take a label as a relevance grade, gain 2^label - 1: a negative
# one scored NDCG@1 -0.5 and trained on nonsense; LightGBM's lambdarank refuses it too.
NEGATIVE_LABEL = "is negative: relevance labels are grades >= 0"
