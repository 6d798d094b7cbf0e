"""Debiased relevance labels from repeated queries: clicks over expected examinations.

When the same query comes back (head queries do), every candidate has been shown several times
at different positions. Under the position-based model a candidate d shown at position k is
clicked with probability theta_k * gamma_d, so over its impressions

    gamma_hat_d = (sum of its labels + strength * prior) / (sum of theta_k over its impressions
                                                           + strength)

estimates gamma_d, its chance of being clicked once examined ("clicks over expected clicks",
COEC). The ratio of sums has far less variance than the mean of the per-impression IPW terms
label / theta_k: one click at position 30 counts as 1 click in 1/theta_30 ≈ 30 expected
examinations' worth of evidence only when there are no other impressions. `strength` is a
pseudo-count of examinations at the global rate `prior` (all labels / all theta), so a
candidate examined little stays near the average instead of jumping to 0 or to 1/theta.

One list per (query id, user cluster), with every distinct candidate once and the features of
its latest impression; label = log2(1 + gamma_hat), so that LambdaMART's gain 2^label - 1 is
gamma_hat itself: the DCG of the labels is, up to scale and a constant, the DCG of what users
click when they look (under PBM with attractiveness affine in the graded gain, the true DCG).
Such lists carry no single served position: train them as ordinary labels, not --unbiased.
"""

from __future__ import annotations

import numpy as np

from trainer.clicks.join import JoinedLogs
from trainer.data.dataset import RankingDataset

DEFAULT_STRENGTH = 1.0


def examination(positions: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """theta of each row's 1-based position: float64 [n]; past the end of theta [K], its last."""
    theta = np.asarray(theta, dtype=np.float64)
    if theta.ndim != 1 or theta.size == 0 or np.any(~(theta > 0)):
        raise ValueError("theta must be a non-empty 1-D array of positive numbers")
    pos = np.asarray(positions, dtype=np.int64)
    return theta[np.minimum(pos, theta.size) - 1]


def aggregate_by_query(
    joined: JoinedLogs, theta: np.ndarray, strength: float = DEFAULT_STRENGTH
) -> tuple[RankingDataset, np.ndarray]:
    """(one list per logged query with debiased labels, the time of each list's latest
    impression float64 [n_lists]). theta [K] is the examination curve (propensities.json);
    lists come in the order of their latest impression, candidates in order of first showing."""
    if not strength > 0:
        raise ValueError(f"strength must be positive, not {strength}")
    data = joined.dataset
    if data.positions is None:
        raise ValueError("aggregating clicks needs the served positions")
    n_rows = data.num_docs
    list_of_row = np.repeat(np.arange(data.num_queries), np.diff(data.group_offsets))
    query_of_list = _codes(joined.query_keys)
    pair_keys = zip(query_of_list[list_of_row].tolist(), joined.candidate_ids.tolist(), strict=True)
    pair = _codes(np.fromiter(pair_keys, dtype=object, count=n_rows))
    n_pairs = int(pair.max()) + 1
    exam = examination(data.positions, theta)
    labels = np.bincount(pair, weights=data.labels, minlength=n_pairs)
    exams = np.bincount(pair, weights=exam, minlength=n_pairs)
    prior = float(labels.sum() / exams.sum())
    gamma = (labels + strength * prior) / (exams + strength)
    row = np.arange(n_rows)
    latest = np.zeros(n_pairs, dtype=np.int64)
    np.maximum.at(latest, pair, row)
    first = np.full(n_pairs, n_rows, dtype=np.int64)
    np.minimum.at(first, pair, row)
    pair_query = query_of_list[list_of_row[latest]]
    # Queries by their latest impression, so a time cut of the result stays a time cut.
    query_time = np.full(int(query_of_list.max()) + 1, -np.inf)
    np.maximum.at(query_time, query_of_list, joined.times)
    query_rank = np.argsort(np.argsort(query_time, kind="stable"), kind="stable")
    order = np.lexsort((first, query_rank[pair_query]))
    sizes = np.bincount(query_rank[pair_query], minlength=query_rank.size)  # all > 0
    rows = latest[order]
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    query_ids = joined.query_keys[_first_index(query_of_list)][np.argsort(query_rank)]
    dataset = RankingDataset(
        features=np.ascontiguousarray(data.features[rows]),
        labels=np.log2(1.0 + gamma[order]),
        group_offsets=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
        query_ids=np.array([str(q).replace("\x1f", "|") for q in query_ids], dtype=object),
        feature_names=data.feature_names,
        source=f"{data.source}, aggregated by query",
        user_ids=None if data.user_ids is None else data.user_ids[list_of_row[rows[starts]]],
    )
    return dataset, np.sort(query_time)


def _codes(values: np.ndarray) -> np.ndarray:
    """Dense int64 codes [n] of hashable values [n], numbered by first appearance."""
    seen: dict[object, int] = {}
    return np.fromiter(
        (seen.setdefault(v, len(seen)) for v in values.tolist()), dtype=np.int64, count=len(values)
    )


def _first_index(codes: np.ndarray) -> np.ndarray:
    """For codes numbered by first appearance: the index of each code's first occurrence."""
    _, index = np.unique(codes, return_index=True)
    return index
