"""Feature values a network cannot take, refused before training.

A network reads NaN as missing (imputed inside the graph with the training mean, or 0 for a
feature the training data never had missing, see trainer.dnn.normalisation). An infinity has
no such meaning: it turns the column's mean and spread into inf/NaN and every score into NaN,
found only when the exported model is checked. It is refused, not changed into something
else, as which finite value it stands for is unknown.
"""

from __future__ import annotations

import numpy as np

from app.errors import LtrError
from trainer.data.dataset import RankingDataset

# Rows scanned at a time: a boolean mask of the whole matrix would cost a quarter of its size.
CHUNK_ROWS = 65536


class FeatureValueError(LtrError, ValueError):
    """Data holding a feature value a network cannot use; the message names the feature."""


def first_infinite(features: np.ndarray) -> tuple[int, int, int] | None:
    """(row, column, count of infinite values) of the first infinite value of float
    [n_docs, n_features] in row order, or None when every value is finite or NaN."""
    first: tuple[int, int] | None = None
    count = 0
    for start in range(0, features.shape[0], CHUNK_ROWS):
        bad = np.isinf(features[start : start + CHUNK_ROWS])
        if not bad.any():
            continue
        count += int(bad.sum())
        if first is None:
            row, column = np.argwhere(bad)[0]
            first = (start + int(row), int(column))
    return None if first is None else (*first, count)


def check_finite_features(data: RankingDataset, engine: str = "--engine dnn") -> None:
    """Raise FeatureValueError naming the file, feature and query of the first infinite
    feature value of `data`, and where it was read as the readers' errors say it (`file:line`
    for LETOR text, `file: row n, column 'c'` for Parquet); data that does not know (rows
    count documents from 1, in file order) says `file: ... at row n`."""
    found = first_infinite(data.features)
    if found is None:
        return
    row, column, count = found
    name = data.names()[column]
    query = data.query_ids[data.query_of(row)]
    value = float(data.features[row, column])
    more = f" ({count} infinite values in all)" if count > 1 else ""
    if data.source_rows is None:
        what = f"{data.source or 'the data'}: feature {name!r} is {value} at row {row + 1}"
    else:
        what = f"{data.place(row, name)}: feature {name!r} is {value}"
    raise FeatureValueError(
        f"{what} (query {query}){more}: {engine} takes NaN as missing but cannot use an "
        "infinite value; replace it (or leave it missing) in the data"
    )
