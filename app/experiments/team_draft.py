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

# pick_teams writes the coins themselves as team codes.
assert (CONTROL, CANDIDATE) == (0, 1)


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
    merged, teams = team_draft_arrays(control, candidate, coins, length)
    return merged, teams.tolist()


def team_draft_arrays(
    control: np.ndarray, candidate: np.ndarray, coins: np.ndarray, length: int | None = None
) -> tuple[list[int], np.ndarray]:
    """`team_draft` with the teams as an array (int8 [k]), the serving path's form."""
    merged, teams = _draft(control, candidate, coins, length)
    teams[: common_prefix(control, candidate, len(merged))] = BOTH
    return merged, teams


def common_prefix(control: np.ndarray, candidate: np.ndarray, limit: int) -> int:
    """How many leading positions (up to `limit`) the two rankings share."""
    differ = np.flatnonzero(control[:limit] != candidate[:limit])
    return int(differ[0]) if differ.size else min(limit, control.size)


def draft(
    control: np.ndarray, candidate: np.ndarray, coins: np.ndarray, length: int | None = None
) -> tuple[list[int], list[int]]:
    """Team draft proper: every result's team is the one that picked it."""
    merged, teams = _draft(control, candidate, coins, length)
    return merged, teams.tolist()


def pick_teams(coins: np.ndarray, k: int) -> np.ndarray:
    """The team of each of the first `k` picks (int8 [k]), which the coins alone decide.

    Teams are even at the start of every round (each picks once per round), so the "fewer
    picks first, a coin when equal" rule is a round of two picks: the coin's team, then the
    other. Which items they pick depends on the rankings; who picks when does not."""
    rounds = (k + 1) // 2
    if coins.size < rounds:
        raise ValueError(f"team draft needs {rounds} coins, got {coins.size}")
    first = np.asarray(coins[:rounds], dtype=np.int8)
    teams = np.empty(2 * rounds, dtype=np.int8)
    teams[0::2] = first  # CANDIDATE is 1, CONTROL 0 (asserted below the imports)
    teams[1::2] = 1 - first
    return teams[:k]


def _draft(
    control: np.ndarray, candidate: np.ndarray, coins: np.ndarray, length: int | None = None
) -> tuple[list[int], np.ndarray]:
    """(merged items, teams int8 [k]). The schedule of picks comes from `pick_teams` in one
    numpy step, so the Python loop does only what is sequential by nature: each pick passes
    over what the other team already took. Only the first k items of either ranking are
    read: before a team's j-th pick it has made j - 1 picks and the other team at most
    k - j, so it passes over at most k - 1 items."""
    n = int(control.size)
    k = n if length is None else min(length, n)
    teams = pick_teams(coins, k)
    a = control[:k].tolist()
    b = candidate[:k].tolist()
    taken: set[int] = set()
    take = taken.add
    merged: list[int] = []
    append = merged.append
    ia = ib = 0
    for team in teams.tolist():
        if team == CANDIDATE:
            item = b[ib]
            while item in taken:
                ib += 1
                item = b[ib]
        else:
            item = a[ia]
            while item in taken:
                ia += 1
                item = a[ia]
        take(item)
        append(item)
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
