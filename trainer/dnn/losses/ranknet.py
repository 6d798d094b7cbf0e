"""RankNet (Burges et al. 2005): pairwise cross-entropy with sigma.

For a pair with label_i > label_j the target probability that i ranks above j is 1, so the
cost is log(1 + exp(-sigma * (s_i - s_j))). Pairs of equal label carry no preference (S_ij = 0
gives the cost a constant-gradient term that only pulls ties together; like LightGBM and
allRank, they are left out).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def preference_pairs(labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """bool [batch, list_len, list_len]: True where i and j are real and label_i > label_j."""
    real = mask[:, :, None] & mask[:, None, :]
    return real & (labels[:, :, None] > labels[:, None, :])


def ranknet_loss(
    scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, sigma: float = 1.0
) -> torch.Tensor:
    """Mean pairwise logistic loss over all preference pairs of the batch.

    scores, labels: float [batch, list_len]; mask: bool [batch, list_len] (False = padding).
    Returns a scalar (0 with a gradient of 0 when the batch has no preference pair).
    """
    pairs = preference_pairs(labels, mask)
    diff = scores[:, :, None] - scores[:, None, :]  # [batch, list_len, list_len]
    cost = torch.where(pairs, F.softplus(-sigma * diff), torch.zeros_like(diff))
    return cost.sum() / pairs.sum().clamp(min=1)
