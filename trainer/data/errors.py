"""The one error type for data that cannot be read, and the rules every reader applies."""

from __future__ import annotations

import numpy as np

from app.errors import LtrError


class DataFormatError(LtrError, ValueError):
    """A data file that cannot be read; the message names the file, the line (or row and
    column) and what is wrong, e.g. `train.txt:12: label 'x' is not a number`."""


def located(path: object, line: int | None, what: str) -> DataFormatError:
    """`<file>:<line>: <what>` (or `<file>: <what>` when no line applies)."""
    where = f"{path}:{line}" if line is not None else f"{path}"
    return DataFormatError(f"{where}: {what}")


# An error quotes the bad token to show what is wrong, not to reprint it: a 5,000-character
# qid (a line glued to the next, a binary file) buried the message under it.
QUOTE_CHARS = 40


def quote(text: str) -> str:
    """`repr(text)`, cut to its first QUOTE_CHARS characters + '…' and its length if longer."""
    if len(text) <= QUOTE_CHARS:
        return repr(text)
    return f"{text[:QUOTE_CHARS]!r}… ({len(text):,} characters)"


def clip(text: str) -> str:
    """`text` unquoted, cut as `quote` cuts it."""
    if len(text) <= QUOTE_CHARS:
        return text
    return f"{text[:QUOTE_CHARS]}… ({len(text):,} characters)"


# Ranking metrics and lambdas take a label as a relevance grade, gain 2^label - 1: a negative
# one scored NDCG@1 -0.5 and trained on nonsense; LightGBM's lambdarank refuses it too.
NEGATIVE_LABEL = "is negative: relevance labels are grades >= 0"
# And a large one: 2^1024 overflows float64 (a 0-tree model with NaN metrics, exit code 0),
# and below that the gains dwarf every other grade (absurd DCG). 31 is where XGBoost stops.
MAX_LABEL = 31
LABEL_TOO_LARGE = (
    f"is above {MAX_LABEL}: relevance labels are grades 0..{MAX_LABEL} (gain 2^label - 1; "
    f"XGBoost refuses grades above {MAX_LABEL} too, LightGBM's default label_gain stops at 30)"
)


def first_bad_label(labels: np.ndarray) -> tuple[int, str] | None:
    """(0-based index, what is wrong) of the first finite label outside the grades
    0..MAX_LABEL, or None; each reader says where (line, or row and column)."""
    bad = np.flatnonzero((labels < 0) | (labels > MAX_LABEL))
    if not bad.size:
        return None
    index = int(bad[0])
    value = float(labels[index])
    return index, f"{value:g} {NEGATIVE_LABEL if value < 0 else LABEL_TOO_LARGE}"


def first_fractional_label(labels: np.ndarray, engine: str) -> tuple[int, str] | None:
    """(0-based index, what is wrong) of the first label LightGBM's lambdarank refuses as not
    a whole number (it holds labels as float32), or None; `engine` is the flag's value."""
    stored = labels.astype(np.float32)
    fractional = np.flatnonzero(stored != np.floor(stored))
    if not fractional.size:
        return None
    index = int(fractional[0])
    return index, (
        f"label {labels[index]:g} is not a whole grade: --engine {engine} (LightGBM's "
        f"lambdarank) takes whole grades 0..{MAX_LABEL}; round the labels, or train with "
        "--engine native, which takes fractional ones"
    )
