"""Position-bias factors learned while boosting (LightGBM 4's lambdarank with `position`).

The click model is "relevance logit + position logit": a document's score for the lambdas is
s_i + b[pos_i], where the trees fit s (relevance) and one scalar b[k] per served position k
absorbs how much being shown at k raises the chance of a click. Because the lambdas see the
position's share of the evidence already explained by b, they push the trees only for what
position does not explain. At serving time positions are unknown, so the exported model is
the trees alone; b is recorded in the manifest's `training.objective`.

Each iteration (LightGBM's `UpdatePositionBiasFactors`): lambdas and hessians on s + b, then a
Newton step per position from the documents shown there, with L2 regularisation `reg` per
document (LightGBM's `lambdarank_position_bias_regularization`, default 0) and the boosting
learning rate:

    b[k] += lr * (sum_k lambda - reg n_k b[k]) / (sum_k hessian + reg n_k + 0.001)

A shift of every b by one constant changes no lambda (each query's pairs see only score
differences), so b is pinned at 0 for the first served position; LightGBM leaves it free.
Under the position-based model b[k] - b[1] tracks log(theta_k) (a logit, not a probability,
so only its order and rough size are comparable).
"""

from __future__ import annotations

import numpy as np

from trainer.lambdamart.served_positions import served_positions
from trainer.lambdamart.unbiased import UnbiasedObjective

NEWTON_EPSILON = 0.001  # LightGBM's guard against a position with no hessian mass


class PositionBiasObjective(UnbiasedObjective):
    """LambdaRank on scores + bias[position]; positions [n_docs] are the served 1-based
    positions (past `max_position` they share its factor). `bias` [n_pos] holds the current
    factors (index k - 1 for position k); `compute` reports NDCG@eval_at of the scores
    WITHOUT the bias, i.e. of the model that is exported. With `normalize` (LightGBM's
    `lambdarank_norm`, see UnbiasedObjective) the factors step on the normalised lambdas."""

    def __init__(
        self,
        labels: np.ndarray,
        group_offsets: np.ndarray,
        positions: np.ndarray,
        learning_rate: float = 0.1,
        regularization: float = 0.0,
        sigma: float = 1.0,
        ndcg_truncation: int | None = None,
        max_pairs_rank: int | None = None,
        eval_at: int = 0,
        empty_value: float = 1.0,
        max_position: int | None = None,
        normalize: bool = False,
    ) -> None:
        super().__init__(
            labels,
            group_offsets,
            None,
            None,
            sigma,
            ndcg_truncation,
            max_pairs_rank,
            eval_at,
            empty_value,
            normalize,
        )
        pos = served_positions(positions, self.labels)
        if not learning_rate > 0:
            raise ValueError(f"learning_rate must be positive, not {learning_rate}")
        if not regularization >= 0:
            raise ValueError(f"regularization must be non-negative, not {regularization}")
        n_pos = int(pos.max()) if max_position is None else int(max_position)
        if n_pos < 1:
            raise ValueError("max_position must be at least 1")
        self.pos = np.ascontiguousarray(np.minimum(pos, n_pos) - 1)
        self.counts = np.bincount(self.pos, minlength=n_pos).astype(np.float64)
        self.served = self.counts > 0
        self.anchor = int(self.pos.min())  # the first served position: its factor stays 0
        self.learning_rate = float(learning_rate)
        self.regularization = float(regularization)
        self.bias = np.zeros(n_pos)
        self.description.update(
            lambdas="position_bias_factors",
            bias_step=self.learning_rate,
            bias_regularization=self.regularization,
        )
        self._describe()

    def compute(
        self, scores: np.ndarray, with_lambdas: bool = True
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Lambdas float64 [n_docs] and hessians float64 [n_docs] of scores + bias[position],
        NDCG@eval_at per query of the scores alone; with lambdas, the bias then takes one
        Newton step."""
        scores = np.ascontiguousarray(scores, dtype=np.float64)
        if not with_lambdas:
            return super().compute(scores, with_lambdas=False)
        if scores.shape != self.labels.shape:
            raise ValueError(f"scores has shape {scores.shape}, labels {self.labels.shape}")
        eval_at = self.eval_at
        try:
            self.eval_at = 0
            lam, hess, ndcg = super().compute(scores + self.bias[self.pos])
        finally:
            self.eval_at = eval_at
        self.update(lam, hess)
        if eval_at > 0:
            ndcg = super().compute(scores, with_lambdas=False)[2]
        return lam, hess, ndcg

    def update(self, lam: np.ndarray, hess: np.ndarray) -> None:
        """One regularised Newton step on every factor from lambdas/hessians [n_docs]."""
        n_pos = self.bias.size
        reg = self.regularization * self.counts
        grad = np.bincount(self.pos, weights=lam, minlength=n_pos) - reg * self.bias
        curv = np.bincount(self.pos, weights=hess, minlength=n_pos) + reg
        step = self.learning_rate * grad / (np.abs(curv) + NEWTON_EPSILON)
        # Positions never served keep 0: they have no evidence, only rounding noise.
        self.bias[self.served] += step[self.served]
        self.bias[self.served] -= self.bias[self.anchor]
        self._describe()

    def _describe(self) -> None:
        self.description["position_bias"] = [round(float(b), 6) for b in self.bias[:20]]
