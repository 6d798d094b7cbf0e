"""Boosting the position-based click model's likelihood (regression-EM with trees as the
relevance model, Wang et al. 2018, "Position bias estimation for unbiased learning to rank in
personal search", section 4).

Under PBM a document shown at position k is clicked with probability theta_k * sigma(f(x)):
theta_k the chance position k is examined, sigma(f(x)) the chance the document is clicked once
examined. The trees fit f by maximising the log-likelihood of the logged clicks c given the
served positions,

    sum_i  c_i log(theta_k sigma(f_i)) + (1 - c_i) log(1 - theta_k sigma(f_i)),

whose gradient per document is c (1 - p) - (1 - c) theta p (1 - p) / (1 - theta p) with
p = sigma(f). The observed second derivative can change sign when theta < 1, so the Newton
leaves use the Fisher information theta p (1 - p)^2 / (1 - theta p) (Fisher scoring), which is
always positive. Every document counts, clicked or not, and lists without a click too: an
examined, unclicked document is evidence against it, one shown at a rarely examined position
almost none, which is exactly the correction IPW makes by weighting, here without its variance.

theta comes from propensities.json (EM, trainer.clicks.propensity) and, with `learn_theta`,
takes one EM step per boosting iteration from the current model: theta_k = the mean over the
documents shown at k of P(examined | c) = c + (1 - c) theta (1 - p) / (1 - theta p).

The exported model is f: it ranks by the estimated chance of a click on examination, and under
PBM with attractiveness increasing in relevance that is the order by relevance.
"""

from __future__ import annotations

import numpy as np

from trainer.lambdamart.served_positions import served_positions
from trainer.lambdamart.unbiased import UnbiasedObjective

THETA_FLOOR = 1e-4  # a position never examined would divide the posterior by zero


class ClickLikelihoodObjective(UnbiasedObjective):
    """Gradients [n_docs] and Fisher information [n_docs] of the PBM log-likelihood of clicks
    (labels > 0) [n_docs] at served 1-based positions [n_docs], given theta [K] (positions past
    K take theta[K - 1]). `compute` reports NDCG@eval_at of the clicks, as the other
    objectives do."""

    def __init__(
        self,
        labels: np.ndarray,
        group_offsets: np.ndarray,
        positions: np.ndarray,
        theta: np.ndarray,
        learn_theta: bool = False,
        eval_at: int = 0,
        empty_value: float = 1.0,
    ) -> None:
        super().__init__(labels, group_offsets, eval_at=eval_at, empty_value=empty_value)
        pos = served_positions(positions, self.labels)
        curve = np.asarray(theta, dtype=np.float64)
        if curve.ndim != 1 or curve.size == 0 or np.any(~(curve > 0)) or np.any(curve > 1):
            raise ValueError("theta must be a non-empty 1-D array of numbers in (0, 1]")
        self.pos = np.ascontiguousarray(np.minimum(pos, curve.size) - 1)
        self.clicks = (self.labels > 0).astype(np.float64)
        self.theta = curve.copy()
        self.learn_theta = bool(learn_theta)
        self.counts = np.bincount(self.pos, minlength=curve.size).astype(np.float64)
        self.description.update(lambdas="click_likelihood", learn_theta=self.learn_theta)
        self._describe()

    def compute(
        self, scores: np.ndarray, with_lambdas: bool = True
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Gradients float64 [n_docs] (positive = raise the score), Fisher information float64
        [n_docs], NDCG@eval_at per query of the scores against the clicks."""
        scores = np.ascontiguousarray(scores, dtype=np.float64)
        ndcg = super().compute(scores, with_lambdas=False)[2]
        if not with_lambdas:
            return np.zeros_like(scores), np.zeros_like(scores), ndcg
        if scores.shape != self.labels.shape:
            raise ValueError(f"scores has shape {scores.shape}, labels {self.labels.shape}")
        p, q = _sigmoids(scores)  # sigma(f), 1 - sigma(f), each without cancellation
        t = self.theta[self.pos]
        c = self.clicks
        # (1 - p) / (1 - t p), written so it stays finite when p rounds to 1 (it is 1 at t = 1).
        denominator = q + (1.0 - t) * p
        ratio = np.divide(q, denominator, out=np.ones_like(q), where=denominator > 0)
        grad = c * q - (1.0 - c) * t * p * ratio
        fisher = t * p * q * ratio
        if self.learn_theta:
            examined = c + (1.0 - c) * t * ratio
            total = np.bincount(self.pos, weights=examined, minlength=self.theta.size)
            seen = self.counts > 0
            self.theta[seen] = np.clip(total[seen] / self.counts[seen], THETA_FLOOR, 1.0)
            self._describe()
        return grad, fisher, ndcg

    def _describe(self) -> None:
        relative = self.theta / self.theta[0]
        self.description["theta"] = [round(float(t), 6) for t in relative[:20]]


def _sigmoids(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sigma(s), sigma(-s)) float64 [n] without overflow for any finite s [n]."""
    e = np.exp(-np.abs(scores))
    small = e / (1.0 + e)  # sigma(-|s|)
    large = 1.0 / (1.0 + e)  # sigma(|s|)
    positive = scores >= 0
    return np.where(positive, large, small), np.where(positive, small, large)
