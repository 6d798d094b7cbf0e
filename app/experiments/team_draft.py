"""Team-draft interleaving (Radlinski, Kurup and Joachims, CIKM 2008).

Two rankings of the same candidates are merged: in each round the team with fewer picks so far
(a fair coin when equal) adds its highest-ranked candidate not yet taken, and that candidate
belongs to the team. A click then credits the team of the clicked result, and the ranker whose
team gets more clicks wins the impression. Because every position is as likely to go to either
team under equal rankers, clicks are unbiased evidence of preference (Chapelle, Joachims,
Radlinski and Yue, TOIS 2012). Solr's LTR `TeamDraftInterleaving` implements the same rule.

The served list is exactly team draft's. For credit, results are marked BOTH (credited to
neither team) in two cases, both decided by the rankings and the served list, never by the
coins, so the comparison stays unbiased:
- the two rankings' common prefix (both put the same results in the same order at the top):
  team draft hands them out by coin alone, so a click on one says nothing about which ranker is
  better and would only add noise. Industrial implementations call such results "neutral";
- any later round whose two picks are the same two results in the same order for both versions
  (each version's best two not yet taken): either coin serves that same list, so the list
  cannot tell which team placed them. Crediting them by the actual coin adds variance and
  nothing else; their expected credit given the served list and the clicks is zero. This is
  conditioning on what was observed (Rao-Blackwell), as Hofmann, Whiteson and de Rijke (CIKM
  2011) marginalise over the assignments that could have produced a list. On the simulator it
  cut the click difference's variance by 7 % (independent errors) to 23 % (versions that share
  90 % of their errors), the impressions to a decision in proportion.
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
    return np.unpackbits(coin_bytes(seed, n))[:n].astype(bool)


def coin_bytes(seed: bytes | int, n: int) -> np.ndarray:
    """The bytes holding `coin_flips`' `n` bits (uint8 [ceil(n / 8)]), most significant first."""
    key = seed if isinstance(seed, bytes) else str(seed).encode()
    # A bytearray, so the array is writable: the compiled merge's signature takes no readonly one.
    return np.frombuffer(bytearray(hashlib.shake_128(key).digest((n + 7) // 8)), dtype=np.uint8)


def team_draft(
    control: np.ndarray, candidate: np.ndarray, coins: np.ndarray, length: int | None = None
) -> tuple[list[int], list[int]]:
    """Merge two rankings (int [n] each, item indices best first, same items) into
    (merged item indices, team of each: CONTROL, CANDIDATE or BOTH, credited to neither: see
    the module's docstring),
    `length` items long (all by default). `coins` (bool [>= ceil(length / 2)]) decides rounds
    where the teams are even: True = the candidate picks first."""
    merged, teams = team_draft_arrays(control, candidate, coins, length)
    return merged, teams.tolist()


def team_draft_arrays(
    control: np.ndarray, candidate: np.ndarray, coins: np.ndarray, length: int | None = None
) -> tuple[list[int], np.ndarray]:
    """`team_draft` with the teams as an array (int8 [k]), the serving path's form."""
    merged, teams, neutral = _draft(control, candidate, coins, length)
    teams[neutral] = BOTH
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
    merged, teams, _ = _draft(control, candidate, coins, length)
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
) -> tuple[list[int], np.ndarray, np.ndarray]:
    """(merged items, teams int8 [k], neutral bool [k]: the rounds either coin would have
    served alike). The schedule of picks comes from `pick_teams` in one numpy step, so the
    Python loop does only what is sequential by nature: each pick passes over what the other
    team already took. Only the first k items of either ranking are read: before a team's
    j-th pick it has made j - 1 picks and the other team at most k - j, so it passes over at
    most k - 1 items; at the start of a round 2r < k items are taken, so each ranking's best
    two not yet taken (one in a last, single-pick round) lie within its first k."""
    n = int(control.size)
    k = n if length is None else min(length, n)
    teams = pick_teams(coins, k)
    neutral = np.zeros(k, dtype=bool)
    a = control[:k].tolist()
    b = candidate[:k].tolist()
    taken: set[int] = set()
    take = taken.add
    merged: list[int] = []
    append = merged.append
    ia = ib = 0
    for t, team in enumerate(teams.tolist()):
        if t % 2 == 0:
            while a[ia] in taken:
                ia += 1
            while b[ib] in taken:
                ib += 1
            if a[ia] == b[ib] and (
                t + 1 == k or _next_free(a, ia, taken) == _next_free(b, ib, taken)
            ):
                neutral[t : t + 2] = True
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
    return merged, teams, neutral


def _next_free(ranking: list[int], after: int, taken: set[int]) -> int:
    """The ranking's first item past index `after` not taken."""
    j = after + 1
    while ranking[j] in taken:
        j += 1
    return ranking[j]


def team_draft_batch(
    control: np.ndarray, candidate: np.ndarray, coins: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Team draft for many lists of one length at once (the simulator's path; same rule as
    `team_draft`). control, candidate: int [m, n] item indices best first per row; coins:
    bool [m, n]. Returns merged item indices int64 [m, n] and teams int8 [m, n] (BOTH as in
    `team_draft`).

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
    neutral = np.zeros((m, n), dtype=bool)
    rounds = np.zeros(m, dtype=np.int64)
    for step in range(n):
        even = picks[:, 0] == picks[:, 1]
        coin = coins[rows, np.minimum(rounds, n - 1)]
        cand_first = np.where(even, coin, picks[:, 1] < picks[:, 0])
        rounds += even
        # Advance each pointer past taken items (at most n steps over the whole loop per row).
        for ptr, ranking in ((ia, control), (ib, candidate)):
            _skip_taken(ptr, ranking, taken, rows)
        if step % 2 == 0:  # a round starts: is it one either coin serves alike?
            same = control[rows, ia] == candidate[rows, ib]
            if step + 1 < n:
                na, nb = ia + 1, ib + 1
                _skip_taken(na, control, taken, rows)
                _skip_taken(nb, candidate, taken, rows)
                same &= (
                    control[rows, np.minimum(na, n - 1)] == candidate[rows, np.minimum(nb, n - 1)]
                )
            neutral[same, step : step + 2] = True
        item = np.where(cand_first, candidate[rows, np.minimum(ib, n - 1)], control[rows, ia])
        merged[:, step] = item
        teams[:, step] = np.where(cand_first, CANDIDATE, CONTROL)
        taken[rows, item] = True
        picks[rows, cand_first.astype(np.int64)] += 1
    same = control == candidate
    prefix = np.where(same.all(axis=1), n, same.argmin(axis=1))
    teams[(np.arange(n)[None, :] < prefix[:, None]) | neutral] = BOTH
    return merged, teams


def _skip_taken(ptr: np.ndarray, ranking: np.ndarray, taken: np.ndarray, rows: np.ndarray) -> None:
    """Moves each row's pointer (int64 [m], in place) to its ranking's next item not taken."""
    n = ranking.shape[1]
    while True:
        stuck = (ptr < n) & taken[rows, ranking[rows, np.minimum(ptr, n - 1)]]
        if not stuck.any():
            return
        ptr += stuck
