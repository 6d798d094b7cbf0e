"""Pointwise regression baseline: squared error between score and label, per document."""

from __future__ import annotations

import torch


def pointwise_loss(scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean squared error over the real documents of the batch.

    scores, labels: float [batch, list_len]; mask: bool [batch, list_len] (False = padding).
    Returns a scalar.
    """
    diff = torch.where(mask, scores - labels, torch.zeros_like(scores))
    count = mask.sum().clamp(min=1)
    return (diff**2).sum() / count
