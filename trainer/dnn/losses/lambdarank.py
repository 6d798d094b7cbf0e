"""LambdaRank as a loss (Burges 2010): the pairwise logistic cost of RankNet
with each pair weighted by |delta NDCG@k|, the change in NDCG from swapping the two documents in
the ranking the current scores give.

The weights are constants of the step (no gradient flows through the sort), so for a pair with
label_i > label_j:
    d loss / d s_i = -sigma * |delta NDCG_ij| / (1 + exp(sigma * (s_i - s_j)))
which is minus the LambdaMART lambda of the pair (positive lambda = push up). Summed over a list,
the gradient of the loss with respect to the scores is exactly minus the native lambdas.

Ties in the current scores keep the stored order (stable sort), as the native learner does, so
at all-zero scores the ranking is the order of the list (the worked example in the tests).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from trainer.dnn.losses.ranknet import preference_pairs


def current_ranks(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """int64 [batch, list_len]: 0-based position of each document when sorted by score
    (descending, ties in stored order); padding ranks after every real document."""
    key = scores.detach().masked_fill(~mask, float("-inf"))
    order = torch.sort(key, dim=1, descending=True, stable=True).indices
    ranks = torch.empty_like(order)
    positions = torch.arange(order.shape[1], device=order.device).expand_as(order)
    return ranks.scatter_(1, order, positions)


def delta_ndcg(
    scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, k: int | None = None
) -> torch.Tensor:
    """|delta NDCG@k| of swapping i and j in the current ranking: float [batch, list_len, list_len].

    Gain 2^label - 1, discount 1/log2(rank + 2) (0-based rank) and, with a cut-off k, 0 from
    rank k on, normalised by the ideal DCG@k; 0 for a list with no relevant document and for
    any pair involving padding.
    """
    with torch.no_grad():
        n = scores.shape[1]
        ranks = current_ranks(scores, mask)
        gains = torch.where(mask, torch.pow(2.0, labels) - 1.0, torch.zeros_like(labels))
        discount = 1.0 / torch.log2(ranks.to(scores.dtype) + 2.0)
        position_discount = 1.0 / torch.log2(torch.arange(n, dtype=scores.dtype) + 2.0)
        if k is not None:
            discount = torch.where(ranks < k, discount, torch.zeros_like(discount))
            position_discount[k:] = 0.0
        ideal = torch.sort(gains, dim=1, descending=True).values
        ideal_dcg = (ideal * position_discount).sum(dim=1, keepdim=True)  # [batch, 1]
        inverse = torch.where(ideal_dcg > 0, 1.0 / ideal_dcg, torch.zeros_like(ideal_dcg))
        gain_gap = (gains[:, :, None] - gains[:, None, :]).abs()
        discount_gap = (discount[:, :, None] - discount[:, None, :]).abs()
        real = mask[:, :, None] & mask[:, None, :]
        delta = gain_gap * discount_gap * inverse[:, :, None]
        return torch.where(real, delta, torch.zeros_like(delta))


def lambdarank_loss(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    sigma: float = 1.0,
    k: int | None = None,
    reduction: Literal["mean", "sum"] = "mean",
    max_pairs_rank: int | None = None,
) -> torch.Tensor:
    """sum over pairs (label_i > label_j) of |delta NDCG@k| * log(1 + exp(-sigma (s_i - s_j))).

    scores, labels: float [batch, list_len]; mask: bool [batch, list_len] (False = padding).
    k: NDCG cut-off of the weights (None = the whole list). reduction "mean" averages the
    per-list sums over the lists of the batch; "sum" adds them, so that the gradient is exactly
    minus the LambdaMART lambdas. max_pairs_rank: only documents in the current top positions
    form pairs (the native learner's max_sort_size-style limit). Returns a scalar.
    """
    if k is not None and k < 1:
        raise ValueError("k must be >= 1 or None")
    weights = delta_ndcg(scores, labels, mask, k)
    pairs = preference_pairs(labels, mask)
    if max_pairs_rank is not None:
        top = current_ranks(scores, mask) < max_pairs_rank
        pairs = pairs & top[:, :, None] & top[:, None, :]
    diff = scores[:, :, None] - scores[:, None, :]  # [batch, list_len, list_len]
    cost = torch.where(pairs, weights * F.softplus(-sigma * diff), torch.zeros_like(diff))
    total = cost.sum()
    return total if reduction == "sum" else total / scores.shape[0]
