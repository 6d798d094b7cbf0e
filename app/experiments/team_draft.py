"""Team-draft interleaving (Radlinski, Kurup and Joachims, CIKM 2008).

Two rankings of the same candidates are merged: in each round the team with fewer picks so far
(a fair coin when equal) adds its highest-ranked candidate not yet taken, and that candidate
belongs to the team. A click then credits the team of the clicked result, and the ranker whose
team gets more clicks wins the impression. Because every position is as likely to go to either
team under equal rankers, clicks are unbiased evidence of preference (Chapelle, Joachims,
Radlinski and Yue, TOIS 2012). Solr's LTR `TeamDraftInterleaving` implements the same rule.

The served list is exactly team draft's. For credit, the results of the two rankings' common
prefix (both put the same results in the same order at the top) are marked BOTH: team draft
hands them out by coin alone, so a click on one says nothing about which ranker is better and
would only add noise. Leaving them out keeps the comparison unbiased (it depends on the
rankings, not on the coins) and makes it more sensitive, since the top positions draw most
clicks. Industrial implementations call such results "neutral".
"""

from __future__ import annotations

import hashlib

import numpy as np

from app.experiments.spec import BOTH, CANDIDATE, CONTROL


def coin_flips(seed: bytes | int, n: int) -> np.ndarray:
    """`n` fair bits (bool [n]) from a seed (SHAKE-128 output), so a request's interleaving is
    reproducible; ~20x cheaper than seeding a numpy Generator per request."""
    key = seed if isinstance(seed, bytes) else str(seed).encode()
    raw = np.frombuffer(hashlib.shake_128(key).digest((n + 7) // 8), dtype=np.uint8)
    return np.unpackbits(raw)[:n].astype(bool)


def team_draft(
    control: np.ndarray, candidate: np.ndarray, coins: np.ndarray, length: int | None = None
) -> tuple[list[int], list[int]]:
    """Merge two rankings (int [n] each, item indices best first, same items) into
    (merged item indices, team of each: CONTROL, CANDIDATE or BOTH for the common prefix),
    `length` items long (all by default). `coins` (bool [>= ceil(length / 2)]) decides rounds
    where the teams are even: True = the candidate picks first."""
    merged, teams = draft(control, candidate, coins, length)
    prefix = common_prefix(control, candidate, len(merged))
    teams[:prefix] = [BOTH] * prefix
    return merged, teams


def common_prefix(control: np.ndarray, candidate: np.ndarray, limit: int) -> int:
    """How many leading positions (up to `limit`) the two rankings share."""
    differ = np.flatnonzero(control[:limit] != candidate[:limit])
    return int(differ[0]) if differ.size else min(limit, control.size)


def draft(
    control: np.ndarray, candidate: np.ndarray, coins: np.ndarray, length: int | None = None
) -> tuple[list[int], list[int]]:
    """Team draft proper: every result's team is the one that picked it."""
    a = control.tolist()
    b = candidate.tolist()
    n = len(a)
    k = n if length is None else min(length, n)
    taken = bytearray(max(n, max(a, default=-1) + 1, max(b, default=-1) + 1))
    merged: list[int] = []
    teams: list[int] = []
    ia = ib = 0
    flips = coins.tolist()
    # Teams are even at the start of every round (each picks once per round), so a round is
    # the coin's team first, then the other: the "fewer picks first" rule in pairs.
    for first in flips:
        for team in (CANDIDATE, CONTROL) if first else (CONTROL, CANDIDATE):
            if len(merged) >= k:
                return merged, teams
            if team == CANDIDATE:
                while taken[b[ib]]:
                    ib += 1
                item = b[ib]
            else:
                while taken[a[ia]]:
                    ia += 1
                item = a[ia]
            taken[item] = 1
            merged.append(item)
            teams.append(team)
    if len(merged) < k:
        raise ValueError(f"team draft needs {(k + 1) // 2} coins, got {len(flips)}")
    return merged, teams


def team_draft_batch(
    control: np.ndarray, candidate: np.ndarray, coins: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Team draft for many lists of one length at once (the simulator's path; same rule as
    `team_draft`). control, candidate: int [m, n] item indices best first per row; coins:
    bool [m, n]. Returns merged item indices int64 [m, n] and teams int8 [m, n] (BOTH for the
    common prefix).

    Vectorised over rows: each step every row picks one item, so the loop runs n times."""
    m, n = control.shape
    rows = np.arange(m)
    # rank_of[r, item] = position of item in each ranking, to skip taken items quickly.
    taken = np.zeros((m, n), dtype=bool)
    merged = np.empty((m, n), dtype=np.int64)
    teams = np.empty((m, n), dtype=np.int8)
    ia = np.zeros(m, dtype=np.int64)
    ib = np.zeros(m, dtype=np.int64)
    picks = np.zeros((m, 2), dtype=np.int64)
    rounds = np.zeros(m, dtype=np.int64)
    for step in range(n):
        even = picks[:, 0] == picks[:, 1]
        coin = coins[rows, np.minimum(rounds, n - 1)]
        cand_first = np.where(even, coin, picks[:, 1] < picks[:, 0])
        rounds += even
        # Advance each pointer past taken items (at most n steps over the whole loop per row).
        for ptr, ranking in ((ia, control), (ib, candidate)):
            while True:
                stuck = (ptr < n) & taken[rows, ranking[rows, np.minimum(ptr, n - 1)]]
                if not stuck.any():
                    break
                ptr += stuck
        item = np.where(cand_first, candidate[rows, np.minimum(ib, n - 1)], control[rows, ia])
        merged[:, step] = item
        teams[:, step] = np.where(cand_first, CANDIDATE, CONTROL)
        taken[rows, item] = True
        picks[rows, cand_first.astype(np.int64)] += 1
    same = control == candidate
    prefix = np.where(same.all(axis=1), n, same.argmin(axis=1))
    teams[np.arange(n)[None, :] < prefix[:, None]] = BOTH
    return merged, teams
