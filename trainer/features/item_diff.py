"""What differs between two item feature sets: features, items, and values of both."""

from __future__ import annotations

from typing import Any

import numpy as np

from trainer.commands.json_values import json_value
from trainer.features.item_table import ItemTable, as_snapshot

SAMPLE = 5


def diff_tables(a: ItemTable, b: ItemTable) -> dict[str, Any]:
    """A JSON-ready report; values are compared on the shared items and features (NaN equals
    NaN, so a missing value on both sides is no difference; an infinite difference is
    "Infinity", as the JSON reports spell infinities)."""
    names_a, names_b = set(a.names), set(b.names)
    shared_names = [n for n in a.names if n in names_b]
    ids_a, ids_b = set(a.ids.tolist()), set(b.ids.tolist())
    only_a = sorted(ids_a - ids_b)
    only_b = sorted(ids_b - ids_a)
    shared_ids = np.asarray(sorted(ids_a & ids_b), dtype=np.str_)
    per_feature: list[dict[str, Any]] = []
    changed_items = 0
    changed_sample: list[str] = []
    if shared_ids.size and shared_names:
        cols_a = np.asarray([a.names.index(n) for n in shared_names], dtype=np.int64)
        cols_b = np.asarray([b.names.index(n) for n in shared_names], dtype=np.int64)
        left, _ = as_snapshot(a).lookup(list(shared_ids), cols_a)
        right, _ = as_snapshot(b).lookup(list(shared_ids), cols_b)
        missing = np.isnan(left), np.isnan(right)
        same = (left == right) | (missing[0] & missing[1])
        changed_rows = (~same).any(axis=1)
        changed_items = int(changed_rows.sum())
        changed_sample = shared_ids[changed_rows][:SAMPLE].tolist()
        # A value that became (or stopped being) missing has no difference to measure: it is
        # counted apart. One that became infinite differs by infinity, not by nothing.
        with np.errstate(invalid="ignore"):
            delta = np.abs(left.astype(np.float64) - right.astype(np.float64))
        for j, name in enumerate(shared_names):
            changed = ~same[:, j]
            if changed.any():
                measured = delta[:, j][changed & ~missing[0][:, j] & ~missing[1][:, j]]
                per_feature.append(
                    {
                        "feature": name,
                        "items_changed": int(changed.sum()),
                        "became_or_stopped_missing": int(
                            (missing[0][:, j] ^ missing[1][:, j]).sum()
                        ),
                        "max_abs_diff": json_value(measured.max()) if measured.size else None,
                    }
                )
    per_feature.sort(key=lambda row: -row["items_changed"])
    identical = not (names_a ^ names_b) and not only_a and not only_b and changed_items == 0
    return {
        "a": {"source": a.source, "items": len(ids_a), "features": len(a.names)},
        "b": {"source": b.source, "items": len(ids_b), "features": len(b.names)},
        "identical": identical,
        "features_only_in_a": sorted(names_a - names_b),
        "features_only_in_b": sorted(names_b - names_a),
        "items_only_in_a": {"count": len(only_a), "sample": only_a[:SAMPLE]},
        "items_only_in_b": {"count": len(only_b), "sample": only_b[:SAMPLE]},
        "items_changed": changed_items,
        "items_changed_sample": changed_sample,
        "features_changed": per_feature,
    }
