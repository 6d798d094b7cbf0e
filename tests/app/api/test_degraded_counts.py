"""`ltr_degraded_responses_total` counts the reasons that degraded an answer, not the
informational ones beside them (the docs call those not degrading)."""

from __future__ import annotations

import numpy as np
from prometheus_client import REGISTRY

from app.api.assembly import report_items
from app.features.item_store import ITEM_FEATURES_MISSING, ItemFeatures


def _count(reason: str) -> float:
    value = REGISTRY.get_sample_value("ltr_degraded_responses_total", {"reason": reason})
    return value or 0.0


def test_item_features_missing_beside_a_fault_is_not_counted_as_degrading() -> None:
    fault = "item_store_redis_unavailable"
    before = _count(fault), _count(ITEM_FEATURES_MISSING)
    items = ItemFeatures(
        np.zeros((2, 1), np.float32), 1, degraded=True, reasons=[fault, ITEM_FEATURES_MISSING]
    )
    body: dict[str, object] = {"reasons": [], "degraded": False}
    report_items(body, items)
    assert body["degraded"] is True and body["reasons"] == [fault, ITEM_FEATURES_MISSING]
    assert (_count(fault), _count(ITEM_FEATURES_MISSING)) == (before[0] + 1, before[1])
