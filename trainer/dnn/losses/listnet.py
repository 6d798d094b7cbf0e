"""ListNet (Cao et al. 2007): cross-entropy between top-one probabilities.

P_y(j) = exp(y_j) / sum_k exp(y_k) from the labels, P_z(j) = softmax of the scores, both over
the real documents of a list only; loss = -sum_j P_y(j) log P_z(j).
"""

from __future__ import annotations

import torch


def masked_log_softmax(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log softmax over the real documents of each list; 0 at padding (never -inf or NaN).

    values: float [batch, list_len]; mask: bool [batch, list_len].
    """
    filled = values.masked_fill(~mask, float("-inf"))
    return torch.where(mask, torch.log_softmax(filled, dim=1), torch.zeros_like(values))


def listnet_loss(scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over lists of the top-one cross-entropy.

    scores, labels: float [batch, list_len]; mask: bool [batch, list_len] (False = padding).
    Returns a scalar.
    """
    target = torch.softmax(labels.masked_fill(~mask, float("-inf")), dim=1)
    target = torch.where(mask, target, torch.zeros_like(target))
    per_list = -(target * masked_log_softmax(scores, mask)).sum(dim=1)
    return per_list.mean()
