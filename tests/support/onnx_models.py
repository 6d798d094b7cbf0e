"""Small ONNX networks written by hand, for tests of the network scorer and its callers."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from app.artifacts.manifest import Manifest, MissingValueRule
from app.artifacts.store import set_current, write_version


def linear_onnx(weights: np.ndarray) -> bytes:
    """scores = nan-as-mean(features) @ weights, mean 0.5 (an additive network)."""
    n = weights.size
    nodes = [
        helper.make_node("IsNaN", ["features"], ["nan"]),
        helper.make_node("Where", ["nan", "mean", "features"], ["filled"]),
        helper.make_node("MatMul", ["filled", "W"], ["fw"]),
        helper.make_node("Reshape", ["fw", "flat"], ["scores"]),
    ]
    inits = [
        numpy_helper.from_array(weights.reshape(n, 1).astype(np.float32), "W"),
        numpy_helper.from_array(np.full(n, 0.5, np.float32), "mean"),
        numpy_helper.from_array(np.array([-1]), "flat"),
    ]
    graph = helper.make_graph(
        nodes,
        "linear",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["N", n])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N"])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model.SerializeToString()


def publish_linear_network(
    registry: Path, name: str, weights: np.ndarray, names: list[str], version: str = "v1"
) -> None:
    """A lambdadnn version of `linear_onnx(weights)` (missing values as the mean), CURRENT."""
    manifest = Manifest(
        name=name,
        version=version,
        kind="lambdadnn",
        created_at=dt.datetime.now(dt.UTC),
        feature_names=names,
        missing_value=MissingValueRule(handled_by="mean_imputation"),
    )
    write_version(registry, manifest, {"model.onnx": linear_onnx(weights)})
    set_current(registry, name, version)
