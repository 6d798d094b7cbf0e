"""Team draft for the serving path, compiled (numba): both versions' rankings, the merge, the
served scores and the results credited to neither team in one call. For 300 results that is
~15 us where the Python path (numpy's two sorts, app.experiments.team_draft's loop) takes
75-145 us; inside a loaded server the Python merge was half of the 0.7 ms an interleaved
request added, and the separate sorts and array hand-offs of the previous kernel still ~0.1 ms.

numba's import and compile take seconds, so a request never waits for them: the first
interleave experiment a process serves starts one background thread that compiles the
kernel (or loads it from numba's disk cache); until it is ready, requests merge in Python,
with identical results.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from app.background_kernel import BackgroundKernel
from app.experiments.spec import BOTH, CANDIDATE, CONTROL

# numba freezes these globals into its on-disk cache, which only this file's changes refresh:
# the kernel's literals below must stay the team codes.
assert (CONTROL, CANDIDATE, BOTH) == (0, 1, 2)
_CANDIDATE, _BOTH, _CONTROL = 1, 2, 0

# (control scores, candidate scores, coin bytes, teams, merged, shown)
SIGNATURE = "void(f8[::1], f8[::1], u1[::1], int8[::1], int64[::1], f8[::1])"


def _rank_and_merge(  # type: ignore[no-untyped-def]
    control_scores, candidate_scores, coin_bytes, teams, merged, shown
):
    """Fills teams[k] (CONTROL / CANDIDATE / BOTH), merged[k] (items) and shown[n] (each
    item's control score, the candidate's where its team is not CONTROL). The pick schedule
    is team_draft.pick_teams' of team_draft.coin_flips' bits (numpy's unpackbits order: the
    most significant bit of each byte first). Each version's ranking is
    serving.ranking_order's: best first, NaN last, ties in input order (a stable sort of the
    negated scores, NaN counted as -inf). The merge, and the rounds either coin serves alike
    (BOTH), read as team_draft._draft, whose argument bounds each pointer: none passes index
    k - 1."""
    for t in range(teams.shape[0]):
        r = t // 2
        coin = (coin_bytes[r >> 3] >> (7 - (r & 7))) & 1
        teams[t] = coin if t % 2 == 0 else 1 - coin
    n = control_scores.shape[0]
    key = np.empty(n, dtype=np.float64)
    for i in range(n):
        v = control_scores[i]
        key[i] = np.inf if np.isnan(v) else -v
    control = np.argsort(key, kind="mergesort")
    for i in range(n):
        v = candidate_scores[i]
        key[i] = np.inf if np.isnan(v) else -v
    candidate = np.argsort(key, kind="mergesort")
    taken = np.zeros(n, dtype=np.uint8)
    k = teams.shape[0]
    ia = 0
    ib = 0
    neutral = np.zeros(k, dtype=np.uint8)
    for t in range(k):
        if t % 2 == 0:
            while taken[control[ia]]:
                ia += 1
            while taken[candidate[ib]]:
                ib += 1
            if control[ia] == candidate[ib]:
                alike = True
                if t + 1 < k:
                    ja = ia + 1
                    while taken[control[ja]]:
                        ja += 1
                    jb = ib + 1
                    while taken[candidate[jb]]:
                        jb += 1
                    alike = control[ja] == candidate[jb]
                if alike:
                    neutral[t] = 1
                    if t + 1 < k:
                        neutral[t + 1] = 1
        if teams[t] == _CANDIDATE:
            item = candidate[ib]
            while taken[item]:
                ib += 1
                item = candidate[ib]
        else:
            item = control[ia]
            while taken[item]:
                ia += 1
                item = control[ia]
        taken[item] = 1
        merged[t] = item
    for t in range(k):
        if neutral[t]:
            teams[t] = _BOTH
    for t in range(k):
        if control[t] != candidate[t]:
            break
        teams[t] = _BOTH
    for i in range(control_scores.shape[0]):
        shown[i] = control_scores[i]
    for t in range(k):
        if teams[t] != _CONTROL:
            shown[merged[t]] = candidate_scores[merged[t]]


def _load() -> Callable[..., None]:
    from app.numba_jit import nogil_jit

    kernel: Callable[..., None] = nogil_jit(_rank_and_merge, SIGNATURE)
    return kernel


KERNEL = BackgroundKernel("team-draft", _load)
ready = KERNEL.ready
compile_now = KERNEL.compile_now
compile_later = KERNEL.compile_later


def merge(
    kernel: Callable[..., None],
    control_scores: np.ndarray,
    candidate_scores: np.ndarray,
    coin_bytes: np.ndarray,
    k: int,
) -> tuple[list[int], np.ndarray, np.ndarray]:
    """(merged items, teams int8 [k], shown scores float64 [n]) by the kernel, for the two
    versions' scores (float64 [n]) and the bytes of team_draft.coin_bytes (uint8, at least
    ceil(k / 2) bits)."""
    merged = np.empty(k, dtype=np.int64)
    teams = np.empty(k, dtype=np.int8)
    shown = np.empty(control_scores.shape[0], dtype=np.float64)
    kernel(
        np.ascontiguousarray(control_scores, dtype=np.float64),
        np.ascontiguousarray(candidate_scores, dtype=np.float64),
        coin_bytes,
        teams,
        merged,
        shown,
    )
    return merged.tolist(), teams, shown
