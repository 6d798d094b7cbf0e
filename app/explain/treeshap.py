"""Exact per-feature contributions of a tree ensemble's score (TreeSHAP).

`contributions(x)` is float64 [n_rows, n_features + 1]: Shapley values of the features with
respect to the training distribution the node covers record, then the expected value; each row
sums to the model's score (up to rounding). On converted models this equals LightGBM's
`predict(pred_contrib=True)` and XGBoost's `predict(pred_contribs=True)`.

The kernel (numba) is imported and compiled on the first explanation, never at model load;
the service runs that first explanation in the background once a model serves
(app/explain/warm.py). numba caches the machine code on disk after the first compile.
"""

from __future__ import annotations

import threading

import numpy as np

from app.artifacts.tree_dump import TreeEnsemble
from app.explain.tree_tables import ExplainUnavailable, TreeTables, build_tables


class TreeShapExplainer:
    """TreeSHAP for one ensemble; thread-safe, tables built once on first use."""

    def __init__(self, ensemble: TreeEnsemble) -> None:
        self.ensemble = ensemble
        self.num_features = ensemble.num_features
        self._tables: TreeTables | None = None
        self._lock = threading.Lock()
        self.ready = False  # tables built and the kernel run once (compiled or loaded)

    @property
    def available(self) -> bool:
        return self.ensemble.has_covers

    def tables(self) -> TreeTables:
        """The kernel's arrays; ExplainUnavailable if the dump has no node covers."""
        if self._tables is None:
            with self._lock:
                if self._tables is None:
                    self._tables = build_tables(self.ensemble)
        return self._tables

    @property
    def expected_value(self) -> float:
        return self.tables().expected_value

    def contributions(self, features: np.ndarray) -> np.ndarray:
        """float64 [n_rows, n_features + 1] for features [n_rows, n_features] (NaN = missing).

        Column j < n_features is feature j's contribution; the last column is the expected
        value. Any float dtype: values are compared in float64, as the reference scorer does.
        """
        from app.explain.treeshap_kernel import shap_values

        x = np.asarray(features)
        if x.ndim != 2 or x.shape[1] != self.num_features:
            raise ValueError(f"expected features of shape [n, {self.num_features}], got {x.shape}")
        t = self.tables()
        x = np.ascontiguousarray(x, dtype=np.float64)
        out = np.zeros((x.shape[0], self.num_features + 1), dtype=np.float64)
        out[:, -1] = t.expected_value
        if t.vertex_offset.shape[0] > 1:
            shap_values(
                x,
                t.parent,
                t.child_left,
                t.child_right,
                t.is_left,
                t.feature,
                t.threshold,
                t.default_left,
                t.missing_zero,
                t.edge_feature,
                t.ancestor,
                t.edge_cover,
                t.big_z,
                t.big_z_above,
                t.value,
                t.vertex_offset,
                t.quad_points,
                t.quad_nodes,
                t.quad_weights,
                out,
            )
        self.ready = True
        return out


__all__ = ["ExplainUnavailable", "TreeShapExplainer"]
