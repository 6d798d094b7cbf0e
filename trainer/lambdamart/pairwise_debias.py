"""Pairwise debiasing of click lambdas (Hu, Wang, Peng, Li 2019, "Unbiased LambdaMART").

IPW (unbiased.py) corrects only the clicked side of a (clicked i, not clicked j) pair. Under
position bias the non-clicked side is biased too: a document at a low position is often not
clicked because it was never examined, not because it is irrelevant. Hu et al. weight each pair
by 1 / (t+_{pos i} t-_{pos j}), where t+_k is the ratio, position k to position 1, of the chance
that a relevant document is clicked and t-_k that of an irrelevant document being left
unclicked. Both are estimated jointly from the current model, once per boosting iteration:

    t+_k = (sum over pairs with the click at k of L_ij / t-_{pos j}  /  same at k = 1)^(1/(p+1))
    t-_k = (sum over pairs with the non-click at k of L_ij / t+_{pos i}  /  same at k = 1)^(1/(p+1))

with L_ij = log(1 + exp(-sigma (s_i - s_j))) |delta NDCG_ij| the pair's loss and p the power
of the regulariser (p = 1 in the paper). t+_1 = t-_1 = 1. The lambdas of an iteration use the
ratios estimated at the end of the previous one (all 1 at the first), as the authors' LightGBM
implementation does. No separate propensity fit is needed.

Positions are the served ones (1-based); positions past `max_position` share its ratio.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

from trainer.lambdamart.served_positions import served_positions
from trainer.lambdamart.unbiased import UnbiasedObjective


@njit(cache=True, nogil=True)
def _debiased_query(
    scores: np.ndarray,
    labels: np.ndarray,
    gains: np.ndarray,
    pos: np.ndarray,
    disc_pairs: np.ndarray,
    inv_norm: float,
    sigma: float,
    lim_i: int,
    lim_j: int,
    t_plus: np.ndarray,
    t_minus: np.ndarray,
    out_l: np.ndarray,
    out_h: np.ndarray,
    cost_plus: np.ndarray,
    cost_minus: np.ndarray,
) -> None:
    """lambda_kernels._one_query with each pair's lambda and hessian divided by
    t+[pos better] * t-[pos worse]; adds each pair's loss to cost_plus/cost_minus [n_pos]."""
    n = scores.size
    order = np.argsort(-scores, kind="mergesort")
    s = scores[order]
    lim_j = min(lim_j, n)
    lim_i = min(lim_i, lim_j)
    for a in range(lim_i):
        ia = order[a]
        for b in range(a + 1, lim_j):
            ib = order[b]
            if labels[ia] == labels[ib]:
                continue
            hi, lo = (ia, ib) if labels[ia] > labels[ib] else (ib, ia)
            dndcg = abs(gains[ia] - gains[ib]) * (disc_pairs[a] - disc_pairs[b]) * inv_norm
            diff = s[a] - s[b] if hi == ia else s[b] - s[a]  # better minus worse
            rho = 0.5 * (1.0 - np.tanh(0.5 * sigma * diff))  # 1 / (1 + exp(sigma diff))
            tp = t_plus[pos[hi]]
            tm = t_minus[pos[lo]]
            w = 1.0 / (tp * tm)
            lam = sigma * rho * dndcg * w
            h = sigma * sigma * dndcg * rho * (1.0 - rho) * w
            out_l[hi] += lam
            out_l[lo] -= lam
            out_h[hi] += h
            out_h[lo] += h
            loss = np.logaddexp(0.0, -sigma * diff) * dndcg
            cost_plus[pos[hi]] += loss / tm
            cost_minus[pos[lo]] += loss / tp


@njit(cache=True, nogil=True, parallel=True)
def _debiased_queries(
    scores: np.ndarray,
    labels: np.ndarray,
    gains: np.ndarray,
    pos: np.ndarray,
    offsets: np.ndarray,
    disc_pairs: np.ndarray,
    inv_trunc: np.ndarray,
    active: np.ndarray,
    sigma: float,
    limits: np.ndarray,
    t_plus: np.ndarray,
    t_minus: np.ndarray,
    n_chunks: int,
    out_l: np.ndarray,
    out_h: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Every query's lambdas into out_l/out_h [n_docs] (zeroed here); the loss sums by
    position (cost+, cost-) [n_pos]. Queries go in n_chunks contiguous runs, each with its
    own cost rows, so the threads never write the same cell."""
    n_queries = offsets.size - 1
    n_pos = t_plus.size
    plus = np.zeros((n_chunks, n_pos))
    minus = np.zeros((n_chunks, n_pos))
    out_l[:] = 0.0
    out_h[:] = 0.0
    for c in prange(n_chunks):
        for q in range(c * n_queries // n_chunks, (c + 1) * n_queries // n_chunks):
            if not active[q]:
                continue
            lo, hi = offsets[q], offsets[q + 1]
            _debiased_query(
                scores[lo:hi],
                labels[lo:hi],
                gains[lo:hi],
                pos[lo:hi],
                disc_pairs,
                inv_trunc[q],
                sigma,
                limits[0],
                limits[1],
                t_plus,
                t_minus,
                out_l[lo:hi],
                out_h[lo:hi],
                plus[c],
                minus[c],
            )
    return plus.sum(axis=0), minus.sum(axis=0)


def position_ratios(cost: np.ndarray, power: float, previous: np.ndarray) -> np.ndarray:
    """(cost_k / cost_1)^(1/(power+1)) per position: float64 [n_pos] from the loss sums
    [n_pos]. A position without loss (no pair there) keeps its previous ratio; all keep
    theirs when position 1 has none."""
    if not cost[0] > 0:
        return previous.copy()
    ratio = np.power(np.maximum(cost, 0.0) / cost[0], 1.0 / (power + 1.0))
    return np.where(cost > 0, ratio, previous)


class PairwiseDebiasObjective(UnbiasedObjective):
    """LambdaRank with Hu et al.'s pairwise debiasing: positions [n_docs] are the served
    1-based positions; `power` is p (> 0); t_plus/t_minus [n_pos] start at 1 unless given;
    `learn=False` keeps them fixed; `non_clicks=False` keeps t- at 1 (clicked side only, a
    learned IPW). `compute` reports NDCG@eval_at on the labels, as
    UnbiasedObjective does; `t_plus`/`t_minus` hold the current estimates."""

    def __init__(
        self,
        labels: np.ndarray,
        group_offsets: np.ndarray,
        positions: np.ndarray,
        discount: np.ndarray | None = None,
        sigma: float = 1.0,
        ndcg_truncation: int | None = None,
        max_pairs_rank: int | None = None,
        eval_at: int = 0,
        empty_value: float = 1.0,
        power: float = 1.0,
        max_position: int | None = None,
        t_plus: np.ndarray | None = None,
        t_minus: np.ndarray | None = None,
        learn: bool = True,
        non_clicks: bool = True,
    ) -> None:
        super().__init__(
            labels,
            group_offsets,
            None,
            discount,
            sigma,
            ndcg_truncation,
            max_pairs_rank,
            eval_at,
            empty_value,
        )
        pos = served_positions(positions, self.labels)
        if not power > 0:
            raise ValueError(f"power must be positive, not {power}")
        n_pos = int(pos.max()) if max_position is None else int(max_position)
        if n_pos < 1:
            raise ValueError("max_position must be at least 1")
        self.pos = np.ascontiguousarray(np.minimum(pos, n_pos) - 1)
        self.power = float(power)
        self.learn = learn
        self.non_clicks = non_clicks
        self.t_plus = _start(t_plus, n_pos, "t_plus")
        self.t_minus = _start(t_minus, n_pos, "t_minus")
        self.description.update(lambdas="pairwise_debias", power=self.power)
        self._describe()

    def compute(
        self, scores: np.ndarray, with_lambdas: bool = True
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Lambdas float64 [n_docs], hessians float64 [n_docs], NDCG@eval_at per query; with
        lambdas (and `learn`), t+ and t- are then re-estimated from this pass's losses."""
        scores = np.ascontiguousarray(scores, dtype=np.float64)
        if not with_lambdas:
            return super().compute(scores, with_lambdas=False)
        if scores.shape != self.labels.shape:
            raise ValueError(f"scores has shape {scores.shape}, labels {self.labels.shape}")
        lam = np.empty_like(scores)
        hess = np.empty_like(scores)
        chunks = int(numba.get_num_threads())
        cost_plus, cost_minus = _debiased_queries(
            scores,
            self.labels,
            self.pair_gains,
            self.pos,
            self.offsets,
            self.disc_pairs,
            self.inv_trunc,
            self.active,
            self.sigma,
            np.array([self.lim_i, self.lim_j], dtype=np.int64),
            self.t_plus,
            self.t_minus,
            max(1, min(chunks, self.offsets.size - 1)),
            lam,
            hess,
        )
        if self.learn:
            self.t_plus = position_ratios(cost_plus, self.power, self.t_plus)
            if self.non_clicks:
                self.t_minus = position_ratios(cost_minus, self.power, self.t_minus)
            self._describe()
        ndcg = super().compute(scores, with_lambdas=False)[2]
        return lam, hess, ndcg

    def _describe(self) -> None:
        self.description["t_plus"] = [round(float(t), 6) for t in self.t_plus[:20]]
        self.description["t_minus"] = [round(float(t), 6) for t in self.t_minus[:20]]


def _start(values: np.ndarray | None, n_pos: int, name: str) -> np.ndarray:
    if values is None:
        return np.ones(n_pos)
    t = np.asarray(values, dtype=np.float64)
    if t.shape != (n_pos,) or np.any(~(t > 0)):
        raise ValueError(f"{name} must hold {n_pos} positive numbers, one per position")
    return t.copy()
