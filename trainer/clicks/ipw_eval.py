"""Offline evaluation on click logs without the logging ranker's position bias.

NDCG of raw clicks rewards whatever ranking put the clicked documents on top, which is mostly
the ranking that was served: a model trained to undo position bias scores worse on it than the
deployed model even when it is better. Inverse propensity weighting fixes the estimate: with
gain (2^label - 1) / theta_k for a document shown at position k, the DCG of any new ranking is
an unbiased estimate of its DCG under the examined-click relevance (Joachims et al. 2017), given
every document had a chance to be examined (theta_k > 0).

`ipw_relabel` expresses that as ordinary labels, label' = log2(1 + (2^label - 1) / theta_k),
so that every metric, early stopping and the nightly gate work unchanged on the result; each
query is then normalised by the ideal DCG of the weighted gains (self-normalised IPW).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from trainer.data.dataset import RankingDataset
from trainer.data.errors import DataFormatError


def ipw_relabel(data: RankingDataset, theta: np.ndarray) -> RankingDataset:
    """The dataset with IPW labels [n_docs] for the examination curve theta [K] (positions past
    K take its last value); DataFormatError when it has no served positions."""
    if data.positions is None:
        raise DataFormatError(
            f"{data.source}: unbiased evaluation needs the served position of every row "
            "(a `position` column, as `ltr dataset --from-logs` writes)"
        )
    curve = np.asarray(theta, dtype=np.float64)
    if curve.ndim != 1 or curve.size == 0 or np.any(~(curve > 0)):
        raise ValueError("theta must be a non-empty 1-D array of positive numbers")
    exam = curve[np.minimum(data.positions, curve.size) - 1]
    labels = np.log2(1.0 + np.expm1(data.labels * np.log(2.0)) / exam)
    return dataclasses.replace(data, labels=labels, source=f"{data.source} (IPW labels)")
