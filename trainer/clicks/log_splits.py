"""Training and validation parts of joined click logs.

- by query (the default when requests log enough distinct `query_id`s): every list of about a
  fraction of the logged query ids validates, chosen by a stable hash (the same query on the
  same side in every run). Early stopping then measures queries the model did not train on.
  Split by time, validation lists repeat the training queries (head queries recur, and
  simulated sessions replay every query): on five simulated datasets the IPW DCG of the latest
  lists kept improving while the NDCG of new queries fell, and early stopping kept 42-227
  trees (test NDCG@10 0.6972 mean); split by query it kept 30-48 (0.7010), near the test
  optimum (26-64).
- by time: the latest lists validate; every validation list was served strictly after every
  training list, so no training example comes from the validation period. Lists served at the
  same time are never split between the two, so a fraction is met as closely as the distinct
  times allow.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

import numpy as np

from trainer.clicks.join import JoinedLogs, LabelRules, join_logs
from trainer.clicks.logs import read_logs
from trainer.data.dataset import RankingDataset
from trainer.data.query_hash import query_hash_fraction

Split = Literal["auto", "query", "time"]
SPLITS: tuple[Split, ...] = ("auto", "query", "time")
DEFAULT_VALID_FRACTION = 0.2
# "auto" splits by query from this many distinct logged query ids: with fewer, a fifth of them
# is too few queries (one query's lists may be half the logs), and a client that sends one
# constant query_id has no queries to tell apart.
AUTO_QUERY_MIN = 20


def split_logs(
    joined: JoinedLogs,
    split: Split = "auto",
    valid_after: float | None = None,
    valid_fraction: float | None = None,
) -> tuple[JoinedLogs, JoinedLogs, Literal["query", "time"]]:
    """(train, valid, the split used). "auto": by query when the requests logged at least
    AUTO_QUERY_MIN distinct query ids, else by time; `valid_after` (a time) splits by time."""
    if valid_after is not None:
        if split == "query":
            raise ValueError("a cut-off time splits by time, not by query")
        return (*split_by_time(joined, valid_after=valid_after), "time")
    fraction = DEFAULT_VALID_FRACTION if valid_fraction is None else valid_fraction
    queries = [] if joined.queries is None else joined.queries.tolist()
    logged = {str(q) for q in queries if q is not None}
    if split == "query" or (split == "auto" and len(logged) >= AUTO_QUERY_MIN):
        return (*split_by_query(joined, fraction), "query")
    return (*split_by_time(joined, valid_fraction=fraction), "time")


def split_by_query(
    joined: JoinedLogs, valid_fraction: float, salt: str = "valid"
) -> tuple[JoinedLogs, JoinedLogs]:
    """(train, valid): valid = every list of the query ids whose stable hash falls below
    `valid_fraction` (about that fraction of the queries); a request that logged no query id
    is a query of its own. With few queries, the lowest hashes, at least one query each side."""
    if not 0.0 < valid_fraction < 1.0:
        raise ValueError(f"valid_fraction must be in (0, 1), got {valid_fraction}")
    queries = joined.queries
    requests = joined.dataset.query_ids
    assert requests is not None
    if queries is None:
        queries = np.full(len(requests), None, dtype=object)
    keys = [f"q:{q}" if q is not None else f"r:{r}" for q, r in zip(queries, requests, strict=True)]
    distinct = sorted(set(keys))
    if len(distinct) < 2:
        raise ValueError(
            f"all {len(keys)} logged lists are of one query ({distinct[0][2:]!r}): there is no "
            "other query to validate on (split by time instead)"
        )
    hashes = query_hash_fraction(np.array([salt + k for k in distinct], dtype=object))
    held = set(np.array(distinct, dtype=object)[hashes < valid_fraction].tolist())
    if not held or len(held) == len(distinct):
        wanted = min(max(1, round(valid_fraction * len(distinct))), len(distinct) - 1)
        held = {distinct[i] for i in np.argsort(hashes, kind="stable")[:wanted]}
    is_valid = np.array([k in held for k in keys], dtype=bool)
    return joined.subset(np.flatnonzero(~is_valid)), joined.subset(np.flatnonzero(is_valid))


def split_by_time(
    joined: JoinedLogs, valid_after: float | None = None, valid_fraction: float | None = None
) -> tuple[JoinedLogs, JoinedLogs]:
    """(train, valid): valid = lists served after `valid_after` (Unix seconds), or the latest
    `valid_fraction` of them; lists served at the cut-off time all go to train."""
    if (valid_after is None) == (valid_fraction is None):
        raise ValueError("give exactly one of valid_after and valid_fraction")
    if valid_fraction is not None:
        valid_after = _fraction_cutoff(joined.times, valid_fraction)
    assert valid_after is not None
    if not math.isfinite(valid_after):
        raise ValueError(f"the cut-off time must be a finite number of seconds, got {valid_after}")
    is_valid = joined.times > valid_after
    if not is_valid.any() or is_valid.all():
        where = "after" if not is_valid.any() else "up to"
        raise ValueError(f"no logged list was served {where} the cut-off time {valid_after}")
    return joined.subset(np.flatnonzero(~is_valid)), joined.subset(np.flatnonzero(is_valid))


def _fraction_cutoff(times: np.ndarray, valid_fraction: float) -> float:
    """The cut-off time whose split of `times` [n] (non-decreasing) has validation lists
    closest in number to `valid_fraction` of them (at least one), both parts non-empty. A cut
    can only fall between two distinct times: lists served at the same second stay together."""
    n = times.size
    if not 0.0 < valid_fraction < 1.0:
        raise ValueError(f"valid_fraction must be in (0, 1), got {valid_fraction}")
    if n < 2:
        raise ValueError(f"{n} logged list is too few to split")
    wanted = max(1, math.ceil(valid_fraction * n))
    if wanted >= n:
        raise ValueError(
            f"a validation fraction of {valid_fraction:g} of the {n} logged lists leaves none "
            f"to train on (at most {(n - 1) / n:.4g} leaves one)"
        )
    # Candidate training sizes: each index where the time steps up.
    cuts = np.flatnonzero(times[1:] > times[:-1]) + 1
    if cuts.size == 0:
        raise ValueError(
            f"all {n} logged lists were served at the same time {float(times[0])}: "
            "there is no time to split them at"
        )
    # Closest to the wanted validation size; on a tie, the larger training part.
    n_train = int(cuts[np.argmin(np.abs((n - cuts) - wanted) * 2 + (cuts < n - wanted))])
    return float(times[n_train - 1])


def dataset_from_logs(
    source: Path,
    manifest_feature_names: list[str] | None,
    holdout_fraction: float,
    valid_fraction: float,
    *,
    rules: LabelRules | None = None,
    model: str | None = None,
) -> tuple[RankingDataset, RankingDataset, RankingDataset]:
    """(train, valid, holdout) from a log source (JSONL file or directory, or a redis://
    URL): labels from feedback, served positions; holdout = the latest `holdout_fraction` of
    the lists (tomorrow's traffic, as the gate should judge it), valid = about
    `valid_fraction` of the rest by query (`split_logs`' "auto")."""
    joined = join_logs(read_logs(source), manifest_feature_names, rules, model)
    rest, holdout = split_by_time(joined, valid_fraction=holdout_fraction)
    train, valid, _ = split_logs(rest, "auto", valid_fraction=valid_fraction)
    return train.dataset, valid.dataset, holdout.dataset
