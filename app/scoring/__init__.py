"""Scorers for a model version: the numpy reference (the definition), compiled trees and
onnxruntime networks, all behind the `Scorer` protocol; `load_scorer` picks one for an artifact.

The compiled and onnxruntime scorers load llvmlite and onnxruntime, so they are imported on
first use: `from app.scoring import predict` stays as cheap as the reference itself.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from app.scoring.protocol import Scorer
from app.scoring.reference import predict, tree_leaf_index

if TYPE_CHECKING:
    from app.scoring.compiled import CompiledTreeScorer
    from app.scoring.loader import load_scorer
    from app.scoring.onnx_scorer import OnnxModelError, OnnxScorer

_LAZY = {
    "CompiledTreeScorer": "app.scoring.compiled",
    "OnnxModelError": "app.scoring.onnx_scorer",
    "OnnxScorer": "app.scoring.onnx_scorer",
    "load_scorer": "app.scoring.loader",
}

__all__ = [
    "CompiledTreeScorer",
    "OnnxModelError",
    "OnnxScorer",
    "Scorer",
    "load_scorer",
    "predict",
    "tree_leaf_index",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
