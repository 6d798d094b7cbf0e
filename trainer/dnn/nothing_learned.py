"""Why a network could learn no ranking from its training data, for the warning `ltr train`
prints (the tree engines' `_why_nothing_learned` in trainer.commands.train is the same idea),
and the features it learns nothing from (every engine warns of those).

A network always trains and always writes a version, but some data gives its loss nothing to
rank: a ranking loss (RankNet, LambdaRank: pairs of documents of one query with different
labels; ListNet: a list whose labels differ) has no gradient that separates documents, and
features that never vary give every document the same input, whatever the loss.
"""

from __future__ import annotations

import numpy as np

from trainer.data.dataset import RankingDataset

# Rows scanned at a time for the constant-feature check: bounds the temporary arrays.
CHUNK_ROWS = 65536


def why_nothing_learned(train: RankingDataset, loss: str) -> str | None:
    """The first reason found in `train` why a network with `loss` (DNNOptions.loss) learns
    no ranking, else None. The pointwise loss regresses each document's label across queries,
    so a list of one document, or of equal labels, still teaches it something.
    """
    labels, sizes = train.labels, train.group_sizes
    if labels.size and np.all(labels == labels[0]):
        return f"every label is {labels[0]:g}, so there is no order to learn"
    if loss != "pointwise" and np.all(sizes <= 1):
        return "every query has a single document, so there are no pairs to rank"
    if constant_features(train.features):
        return "every feature is constant in the training data, so every document scores the same"
    if loss != "pointwise":
        # Pairs exist only within a query: labels equal inside every query leave none.
        first = np.repeat(labels[train.group_offsets[:-1]], sizes)
        if np.all(labels == first):
            return "no query has documents with different labels, so there are no pairs to rank"
    return None


def constant_features(features: np.ndarray) -> bool:
    """True when no column of float [n_docs, n_features] takes two different values once a
    missing value is imputed (NaN = missing: the column's only value, or the 0 of an all-NaN
    column, stands in for it; see trainer.dnn.normalisation)."""
    if features.shape[0] == 0:
        return True
    low = np.full(features.shape[1], np.nan)
    high = np.full(features.shape[1], np.nan)
    for start in range(0, features.shape[0], CHUNK_ROWS):
        chunk = features[start : start + CHUNK_ROWS]
        # fmin/fmax skip NaN: a column is NaN here only while every value so far is missing.
        low = np.fmin(low, np.fmin.reduce(chunk, axis=0))
        high = np.fmax(high, np.fmax.reduce(chunk, axis=0))
    return bool(np.all((low == high) | np.isnan(low)))


# Names a warning lists at most; the count says how many more.
NAMES_SHOWN = 10


def missing_everywhere(features: np.ndarray) -> np.ndarray:
    """bool [n_features]: the columns of float [n_docs, n_features] that are NaN in every row."""
    out = np.ones(features.shape[1], dtype=bool)
    for start in range(0, features.shape[0], CHUNK_ROWS):
        out &= np.isnan(features[start : start + CHUNK_ROWS]).all(axis=0)
    return out


def never_present_warning(train: RankingDataset, learner: str = "network") -> str | None:
    """A warning naming the features missing in every training row: the model learns nothing
    from them, which a client sending real values would not expect. A network (`learner`
    "network") serves them as missing whatever a request sends (trainer.dnn.normalisation);
    trees ("trees") never split on them, so a request's value is ignored. None when every
    feature is present somewhere (or every one is missing: why_nothing_learned says that)."""
    missing = missing_everywhere(train.features)
    if not missing.any() or missing.all():
        return None
    names = [n for n, m in zip(train.names(), missing, strict=True) if m]
    shown = ", ".join(repr(n) for n in names[:NAMES_SHOWN])
    more = f" and {len(names) - NAMES_SHOWN} more" if len(names) > NAMES_SHOWN else ""
    one = len(names) == 1
    which = f"feature {shown} is" if one else f"features {shown}{more} are"
    if learner == "trees":
        effect = (
            f"no tree can split on {'it' if one else 'them'}, so the model ignores whatever "
            "value a request sends"
        )
    else:
        effect = (
            f"the network learns nothing from {'it' if one else 'them'} and scores every "
            f"request as if {'it were' if one else 'they were'} missing, whatever value it sends"
        )
    return (
        f"{which} missing (NaN) in every training row: {effect}; fill the data in or leave "
        f"the feature{'' if one else 's'} out"
    )
