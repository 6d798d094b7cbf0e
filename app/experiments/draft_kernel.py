"""Team draft's merge for the serving path, compiled (numba): 3-5 us for 300 results where the
Python loop (app.experiments.team_draft) takes 75-145 us, and the served scores and the
common prefix in the same pass. With everything else an interleaved request adds, the merge
was about half of the added time (0.35 of 0.7 ms at 300 candidates).

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

# (control order, candidate order, teams, merged, taken, control scores, candidate scores, shown)
SIGNATURE = (
    "void(int64[::1], int64[::1], int8[::1], int64[::1], uint8[::1], f8[::1], f8[::1], f8[::1])"
)


def _merge(  # type: ignore[no-untyped-def]
    control, candidate, teams, merged, taken, control_scores, candidate_scores, shown
):
    """Fills merged[k] (items), rewrites teams[k] (the pick schedule in, CONTROL / CANDIDATE /
    BOTH out) and shown[n] (each item's control score, the candidate's where its team is not
    CONTROL). control, candidate: int64 [n] permutations of range(n), best first; taken:
    uint8 [n] zeros. Reads as team_draft._draft, whose argument bounds each pointer: neither
    passes index k - 1."""
    k = teams.shape[0]
    ia = 0
    ib = 0
    for t in range(k):
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

    kernel: Callable[..., None] = nogil_jit(_merge, SIGNATURE)
    return kernel


KERNEL = BackgroundKernel("team-draft", _load)
ready = KERNEL.ready
compile_now = KERNEL.compile_now
compile_later = KERNEL.compile_later


def merge(
    kernel: Callable[..., None],
    control_order: np.ndarray,
    candidate_order: np.ndarray,
    teams: np.ndarray,
    control_scores: np.ndarray,
    candidate_scores: np.ndarray,
) -> tuple[list[int], np.ndarray, np.ndarray]:
    """(merged items, teams int8 [k], shown scores float64 [n]) by the kernel. The orders are
    ranking_order's (permutations of range(n)); `teams` is pick_teams' schedule of k picks."""
    n = control_order.shape[0]
    k = teams.shape[0]
    merged = np.empty(k, dtype=np.int64)
    out_teams = np.array(teams, dtype=np.int8)
    shown = np.empty(n, dtype=np.float64)
    kernel(
        np.ascontiguousarray(control_order, dtype=np.int64),
        np.ascontiguousarray(candidate_order, dtype=np.int64),
        out_teams,
        merged,
        np.zeros(n, dtype=np.uint8),
        np.ascontiguousarray(control_scores, dtype=np.float64),
        np.ascontiguousarray(candidate_scores, dtype=np.float64),
        shown,
    )
    return merged.tolist(), out_teams, shown
