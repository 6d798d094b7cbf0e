"""numba kernels of the lambda gradients (see lambdas.py): per query, the documents are sorted by
score once and every pair with different labels is visited once."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

NO_LIMIT = np.iinfo(np.int64).max
# Pairs per pass below which the queries are done on one thread.
PARALLEL_PAIRS = 500_000


@njit(cache=True, nogil=True)
def _discounts(n: int, natural_log: bool) -> np.ndarray:
    """1 / log(rank + 1) for ranks 1..n: float64 [n]."""
    out = np.empty(n, dtype=np.float64)
    for p in range(n):
        out[p] = 1.0 / np.log(p + 2.0) if natural_log else 1.0 / np.log2(p + 2.0)
    return out


@njit(cache=True, nogil=True)
def _ideal_dcg(gains: np.ndarray, disc: np.ndarray, k: int) -> float:
    ideal = np.sort(gains)[::-1]
    total = 0.0
    for p in range(min(k, ideal.size)):
        total += ideal[p] * disc[p]
    return total


@njit(cache=True, nogil=True, parallel=True)
def _query_norms(
    gains: np.ndarray,
    labels: np.ndarray,
    offsets: np.ndarray,
    disc: np.ndarray,
    trunc: int,
    disc_eval: np.ndarray,
    k: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per query: 1/ideal DCG@trunc (0 = no pairs), 1/ideal DCG@k (0 = no relevant doc), active."""
    nq = offsets.size - 1
    inv_trunc = np.zeros(nq)
    inv_k = np.zeros(nq)
    active = np.zeros(nq, dtype=np.bool_)
    for q in prange(nq):
        lo, hi = offsets[q], offsets[q + 1]
        g = gains[lo:hi]
        best_t = _ideal_dcg(g, disc, trunc)
        best_k = _ideal_dcg(g, disc_eval, k)
        if best_t > 0.0:
            inv_trunc[q] = 1.0 / best_t
        if best_k > 0.0:
            inv_k[q] = 1.0 / best_k
        lab = labels[lo:hi]
        active[q] = lab.min() != lab.max() and best_t > 0.0
    return inv_trunc, inv_k, active


@njit(cache=True, nogil=True)
def _one_query(
    scores: np.ndarray,
    labels: np.ndarray,
    gains: np.ndarray,
    disc_pairs: np.ndarray,
    inv_norm: float,
    sigma: float,
    lim_i: int,
    lim_j: int,
    out_l: np.ndarray,
    out_h: np.ndarray,
) -> None:
    """Writes the lambdas of one query. All arrays are the query's slices [n]."""
    n = scores.size
    order = np.argsort(-scores, kind="mergesort")  # stable: ties keep input order
    s = scores[order]
    lab = labels[order]
    gain = gains[order]
    # exp(sigma s) relative to the top score turns each pair's sigmoid into one division:
    # rho_ij = 1 / (1 + exp(sigma (s_i - s_j))) = e_j / (e_i + e_j).
    e = np.exp(sigma * (s - s[0]))
    lam = np.zeros(n)
    hes = np.zeros(n)
    lim_j = min(lim_j, n)
    lim_i = min(lim_i, lim_j)
    sigma2 = sigma * sigma
    for a in range(lim_i):
        la = lab[a]
        ga = gain[a]
        da = disc_pairs[a]
        ea = e[a]
        acc_l = 0.0
        acc_h = 0.0
        for b in range(a + 1, lim_j):
            lb = lab[b]
            if la == lb:
                continue
            # Discounts never increase down the ranking, so da - db is |delta discount|.
            dndcg = abs(ga - gain[b]) * (da - disc_pairs[b]) * inv_norm
            eb = e[b]
            den = ea + eb
            if den > 0.0:
                # rho for the better document of the pair, 1 - rho for the worse.
                rho = (eb if la > lb else ea) / den
            else:  # both scores so far below the top that exp underflows
                diff = s[a] - s[b] if la > lb else s[b] - s[a]
                rho = 1.0 / (1.0 + np.exp(sigma * diff))
            lam_ab = sigma * rho * dndcg
            h_ab = sigma2 * dndcg * rho * (1.0 - rho)
            if la > lb:
                acc_l += lam_ab
                lam[b] -= lam_ab
            else:
                acc_l -= lam_ab
                lam[b] += lam_ab
            acc_h += h_ab
            hes[b] += h_ab
        lam[a] += acc_l
        hes[a] += acc_h
    for p in range(n):
        out_l[order[p]] = lam[p]
        out_h[order[p]] = hes[p]


@njit(cache=True, nogil=True)
def _ndcg_at(scores: np.ndarray, gains: np.ndarray, disc: np.ndarray, k: int, inv: float) -> float:
    order = np.argsort(-scores, kind="mergesort")
    total = 0.0
    for p in range(min(k, scores.size)):
        total += gains[order[p]] * disc[p]
    return total * inv


@njit(cache=True, nogil=True)
def _query_step(
    q: int,
    scores: np.ndarray,
    labels: np.ndarray,
    gains: np.ndarray,
    offsets: np.ndarray,
    disc_pairs: np.ndarray,
    disc_eval: np.ndarray,
    inv_trunc: np.ndarray,
    inv_k: np.ndarray,
    active: np.ndarray,
    params: np.ndarray,
    limits: np.ndarray,
    with_lambdas: bool,
    out_l: np.ndarray,
    out_h: np.ndarray,
    out_ndcg: np.ndarray,
) -> None:
    """One query: lambdas/hessians (params = sigma, empty_value; limits = lim_i, lim_j, k)."""
    lo, hi = offsets[q], offsets[q + 1]
    out_l[lo:hi] = 0.0
    out_h[lo:hi] = 0.0
    if with_lambdas and active[q]:
        _one_query(
            scores[lo:hi],
            labels[lo:hi],
            gains[lo:hi],
            disc_pairs,
            inv_trunc[q],
            params[0],
            limits[0],
            limits[1],
            out_l[lo:hi],
            out_h[lo:hi],
        )
    eval_at = limits[2]
    if eval_at > 0:
        if inv_k[q] == 0.0:
            out_ndcg[q] = params[1]
        else:
            out_ndcg[q] = _ndcg_at(scores[lo:hi], gains[lo:hi], disc_eval, eval_at, inv_k[q])


@njit(cache=True, nogil=True, parallel=True)
def _queries_kernel(
    scores: np.ndarray,
    labels: np.ndarray,
    gains: np.ndarray,
    offsets: np.ndarray,
    disc_pairs: np.ndarray,
    disc_eval: np.ndarray,
    inv_trunc: np.ndarray,
    inv_k: np.ndarray,
    active: np.ndarray,
    params: np.ndarray,
    limits: np.ndarray,
    with_lambdas: bool,
    parallel: bool,
    out_l: np.ndarray,
    out_h: np.ndarray,
    out_ndcg: np.ndarray,
) -> None:
    n_queries = offsets.size - 1
    if parallel:
        for q in prange(n_queries):
            _query_step(
                q,
                scores,
                labels,
                gains,
                offsets,
                disc_pairs,
                disc_eval,
                inv_trunc,
                inv_k,
                active,
                params,
                limits,
                with_lambdas,
                out_l,
                out_h,
                out_ndcg,
            )
    else:
        for q in range(n_queries):
            _query_step(
                q,
                scores,
                labels,
                gains,
                offsets,
                disc_pairs,
                disc_eval,
                inv_trunc,
                inv_k,
                active,
                params,
                limits,
                with_lambdas,
                out_l,
                out_h,
                out_ndcg,
            )


def _all_queries(
    scores: np.ndarray,
    labels: np.ndarray,
    gains: np.ndarray,
    offsets: np.ndarray,
    disc_pairs: np.ndarray,
    disc_eval: np.ndarray,
    inv_trunc: np.ndarray,
    inv_k: np.ndarray,
    active: np.ndarray,
    sigma: float,
    lim_i: int,
    lim_j: int,
    eval_at: int,
    empty_value: float,
    with_lambdas: bool,
    out_l: np.ndarray,
    out_h: np.ndarray,
    out_ndcg: np.ndarray,
) -> None:
    """Every query's lambdas into out_l/out_h [n_docs] and NDCG@eval_at into out_ndcg
    [n_queries] (eval_at 0: none); on several threads when there are enough pairs."""
    sizes = np.diff(offsets)
    pair_work = float(np.sum(np.minimum(sizes, lim_i) * sizes)) if with_lambdas else 0.0
    _queries_kernel(
        scores,
        labels,
        gains,
        offsets,
        disc_pairs,
        disc_eval,
        inv_trunc,
        inv_k,
        active,
        np.array([sigma, empty_value]),
        np.array([lim_i, lim_j, eval_at], dtype=np.int64),
        with_lambdas,
        pair_work + sizes.size * 100.0 >= PARALLEL_PAIRS,
        out_l,
        out_h,
        out_ndcg,
    )
