"""Impression-log fixtures: a Redis of our own, settings and a rerank answer to log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from prometheus_client import REGISTRY

from app.settings import Settings


def settings(**overrides: Any) -> Settings:
    return Settings(**{"impressions_enabled": True, **overrides})


def jsonl_settings(tmp_path: Path, **overrides: Any) -> Settings:
    return settings(impressions_jsonl=tmp_path / "log" / "impressions.jsonl", **overrides)


def answer(request_id: str, ids: list[Any], order: list[int]) -> dict[str, Any]:
    """A /rerank answer body as routes builds it (before `_order` is removed)."""
    return {
        "request_id": request_id,
        "model": {"name": "m", "version": "v1"},
        "results": [{"id": ids[i], "score": 0.0, "rank": r} for r, i in enumerate(order, 1)],
        "_order": order,
    }


def features(n: int, nf: int = 3) -> np.ndarray:
    """Row i is i, i + 0.5, i + 0.25 ...: easy to tell rows apart after a round trip."""
    return (np.arange(n)[:, None] + np.array([0.0, 0.5, 0.25])[:nf]).astype(np.float32)


def dropped(kind: str, reason: str) -> float:
    value = REGISTRY.get_sample_value(
        "ltr_impressions_dropped_total", {"kind": kind, "reason": reason}
    )
    return value or 0.0
