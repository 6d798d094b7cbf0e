from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from app.scoring.onnx_scorer import OnnxModelError, OnnxScorer, check_self_contained

N_FEATURES, USER_DIM = 4, 3
RNG = np.random.default_rng(0)
W = RNG.normal(size=(N_FEATURES, 1)).astype(np.float32)
V = RNG.normal(size=(USER_DIM, 1)).astype(np.float32)


def _model(with_user: bool = False, output: str = "scores") -> onnx.ModelProto:
    """scores[N] = features @ W (+ user @ V, broadcast over the rows)."""
    nodes = [helper.make_node("MatMul", ["features", "W"], ["fw"])]
    inputs = [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["N", N_FEATURES])]
    inits = [numpy_helper.from_array(W, "W"), numpy_helper.from_array(np.array([-1]), "flat")]
    last = "fw"
    if with_user:
        inputs.append(helper.make_tensor_value_info("user", TensorProto.FLOAT, [1, USER_DIM]))
        inits.append(numpy_helper.from_array(V, "V"))
        nodes += [
            helper.make_node("MatMul", ["user", "V"], ["uv"]),
            helper.make_node("Add", ["fw", "uv"], ["sum"]),
        ]
        last = "sum"
    nodes.append(helper.make_node("Reshape", [last, "flat"], [output]))
    graph = helper.make_graph(
        nodes,
        "tiny",
        inputs,
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, ["N"])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_scores_match_numpy() -> None:
    scorer = OnnxScorer(_model().SerializeToString())
    x = RNG.normal(size=(25, N_FEATURES)).astype(np.float32)
    got = scorer.score(x)
    assert got.dtype == np.float64 and got.shape == (25,)
    np.testing.assert_allclose(got, (x @ W)[:, 0], rtol=1e-5, atol=1e-6)
    assert scorer.num_features == N_FEATURES and scorer.user_dim is None
    assert scorer.score(np.zeros((0, N_FEATURES), np.float32)).shape == (0,)


def test_user_input_is_fed_as_one_row() -> None:
    scorer = OnnxScorer(_model(with_user=True).SerializeToString(), user_input=True)
    x = RNG.normal(size=(7, N_FEATURES)).astype(np.float32)
    u = RNG.normal(size=USER_DIM).astype(np.float32)
    expected = (x @ W)[:, 0] + float(u @ V[:, 0])
    np.testing.assert_allclose(scorer.score(x, user=u), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(scorer.score(x, user=u[None, :]), expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="needs the user-cluster embedding"):
        scorer.score(x)
    with pytest.raises(ValueError, match="user embedding of 3"):
        scorer.score(x, user=np.zeros(5, np.float32))


def test_many_threads_share_one_session() -> None:
    scorer = OnnxScorer(_model().SerializeToString())
    inputs = [RNG.normal(size=(n, N_FEATURES)).astype(np.float32) for n in range(1, 17)]
    expected = [scorer.score(x) for x in inputs]
    failures: list[int] = []

    def work(offset: int) -> None:
        for i in range(40):
            k = (i + offset) % len(inputs)
            if not np.array_equal(scorer.score(inputs[k]), expected[k]):
                failures.append(k)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def test_external_data_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    onnx.save_model(
        _model(), path, save_as_external_data=True, location="weights.bin", size_threshold=0
    )
    data = path.read_bytes()
    with pytest.raises(OnnxModelError, match=r"external data \(W"):
        check_self_contained(data)
    with pytest.raises(OnnxModelError, match="must be self-contained"):
        OnnxScorer(data)


def test_external_data_inside_a_subgraph_is_found() -> None:
    inner_w = numpy_helper.from_array(W, "inner_W")
    inner_w.data_location = TensorProto.EXTERNAL
    inner = helper.make_graph(
        [helper.make_node("Identity", ["inner_W"], ["out"])],
        "branch",
        [],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        [inner_w],
    )
    node = helper.make_node("If", ["cond"], ["y"], then_branch=inner, else_branch=inner)
    model = _model()
    model.graph.node.append(node)
    with pytest.raises(OnnxModelError, match="inner_W"):
        check_self_contained(model.SerializeToString())


@pytest.mark.parametrize(
    ("data", "user_input", "message"),
    [
        (b"not a model at all", False, "cannot be loaded|malformed"),
        (_model(output="y").SerializeToString(), False, "output named 'scores'"),
        (_model(with_user=True).SerializeToString(), False, "expects no input named 'user'"),
        (_model().SerializeToString(), True, "expects an input named 'user'"),
    ],
)
def test_wrong_models_are_refused(data: bytes, user_input: bool, message: str) -> None:
    with pytest.raises(OnnxModelError, match=message):
        OnnxScorer(data, user_input=user_input)


def test_wrong_shapes_are_refused() -> None:
    scorer = OnnxScorer(_model().SerializeToString())
    with pytest.raises(ValueError, match=r"shape \[n, 4\]"):
        scorer.score(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="no user-cluster embedding"):
        scorer.score(np.zeros((2, 4), np.float32), user=np.zeros(3, np.float32))
