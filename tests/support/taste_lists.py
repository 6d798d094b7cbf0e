"""Query lists graded by a per-list taste for feature 0: the personalised data the user-feature
tests learn from (users of opposite tastes rank the same documents in opposite orders)."""

from __future__ import annotations

import numpy as np

from trainer.data.dataset import RankingDataset


def graded_by_taste(
    x: np.ndarray, taste: np.ndarray, n_docs: int, second: float, user_ids: np.ndarray
) -> RankingDataset:
    """Lists of `n_docs` rows of `x` [n_lists * n_docs, n_features]; each list's two rows of
    highest utility taste * x0 + second * x1 get grade 2, the next two grade 1 (`taste`
    [n_lists * n_docs], +1 or -1 per row)."""
    n_lists = x.shape[0] // n_docs
    utility = taste * x[:, 0] + second * x[:, 1]
    labels = np.zeros(x.shape[0])
    for q in range(n_lists):
        rows = slice(q * n_docs, (q + 1) * n_docs)
        order = np.argsort(-utility[rows])
        labels[rows][order[:2]] = 2.0
        labels[rows][order[2:4]] = 1.0
    return RankingDataset(
        features=x,
        labels=labels,
        group_offsets=np.arange(0, x.shape[0] + 1, n_docs, dtype=np.int64),
        query_ids=np.arange(n_lists),
        user_ids=user_ids,
    )
