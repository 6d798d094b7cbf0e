from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from app.artifacts.manifest import (
    BucketedField,
    ClusterScheme,
    Manifest,
    MissingValueRule,
    UserClusters,
    new_version_id,
)
from app.artifacts.store import ArtifactError, load_version, write_version
from app.artifacts.tree_dump import Tree, TreeEnsemble
from app.scoring import reference
from app.scoring.compiled import CompiledTreeScorer
from app.scoring.loader import load_scorer
from app.scoring.onnx_scorer import OnnxScorer


def _manifest(kind: str, n_features: int, user_dim: int | None = None) -> Manifest:
    clusters = None
    if user_dim is not None:
        scheme = ClusterScheme(fields=[BucketedField(name="country", kind="categorical")])
        clusters = UserClusters(scheme=scheme, embedding_dim=user_dim, input="onnx_input")
    handled = "tree_default_direction" if kind == "lambdamart" else "mean_imputation"
    return Manifest(
        name="m",
        version=new_version_id(),
        kind=kind,
        created_at=dt.datetime.now(dt.UTC),
        feature_names=[f"f{i}" for i in range(n_features)],
        missing_value=MissingValueRule(handled_by=handled),
        user_clusters=clusters,
    )


def _ensemble(n_features: int) -> TreeEnsemble:
    tree = Tree(
        split_feature=np.array([1, 0], np.int32),
        threshold=np.array([0.5, 0.25]),
        left=np.array([1, ~0], np.int32),
        right=np.array([~2, ~1], np.int32),
        default_left=np.array([False, True]),
        leaf_value=np.array([-1.0, 0.5, 2.0]),
    )
    return TreeEnsemble(n_features, [tree, tree], base_score=0.25)


def _onnx(n_features: int, user_dim: int | None) -> bytes:
    w = numpy_helper.from_array(np.ones((n_features, 1), np.float32), "W")
    flat = numpy_helper.from_array(np.array([-1]), "flat")
    inputs = [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["N", n_features])]
    if user_dim is not None:
        inputs.append(helper.make_tensor_value_info("user", TensorProto.FLOAT, [1, user_dim]))
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["features", "W"], ["fw"]),
            helper.make_node("Reshape", ["fw", "flat"], ["scores"]),
        ],
        "g",
        inputs,
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N"])],
        [w, flat],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model.SerializeToString()


def test_lambdamart_artifact_gives_a_compiled_scorer(tmp_path: Path) -> None:
    ensemble = _ensemble(3)
    path = write_version(
        tmp_path, _manifest("lambdamart", 3), {"model.json": ensemble.to_json_bytes()}
    )
    cache = tmp_path / "cache"
    scorer = load_scorer(load_version(path), threads=2, cache_dir=cache)
    assert isinstance(scorer, CompiledTreeScorer)
    assert scorer.threads == 2 and len(list(cache.glob("*.o"))) == 1
    rows = np.array([[0.1, 0.2, 0.0], [np.nan, 0.9, 1.0], [0.3, np.nan, 2.0]], np.float32)
    np.testing.assert_array_equal(scorer.score(rows), reference.predict(ensemble, rows))


def test_lambdadnn_artifact_gives_an_onnx_scorer(tmp_path: Path) -> None:
    path = write_version(tmp_path, _manifest("lambdadnn", 4, 2), {"model.onnx": _onnx(4, 2)})
    scorer = load_scorer(load_version(path))
    assert isinstance(scorer, OnnxScorer) and scorer.user_dim == 2
    got = scorer.score(np.ones((3, 4), np.float32), user=np.zeros(2, np.float32))
    np.testing.assert_allclose(got, [4.0, 4.0, 4.0])


@pytest.mark.parametrize(
    ("kind", "files", "user_dim", "message"),
    [
        ("lambdamart", {"model.json": _ensemble(2).to_json_bytes()}, None, "2 features, manifest"),
        ("lambdamart", {"model.json": b"{not json"}, None, "not valid JSON"),
        ("lambdadnn", {"model.onnx": _onnx(5, None)}, None, "5 features, manifest lists 4"),
        ("lambdadnn", {"model.onnx": _onnx(4, 3)}, 2, "user input has width 3"),
        ("lambdadnn", {"model.onnx": b"\x00garbage"}, None, "model.onnx"),
    ],
)
def test_bad_models_are_refused_with_the_file_named(
    tmp_path: Path, kind: str, files: dict[str, bytes], user_dim: int | None, message: str
) -> None:
    path = write_version(
        tmp_path, _manifest(kind, 4 if kind == "lambdadnn" else 3, user_dim), files
    )
    with pytest.raises(ArtifactError, match=message) as info:
        load_scorer(load_version(path))
    assert str(path) in str(info.value)
