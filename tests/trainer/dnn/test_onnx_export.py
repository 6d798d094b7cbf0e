import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch", reason="the dnn extra (torch) is not installed")

from trainer.dnn.models import build_ranker
from trainer.dnn.normalisation import fit_standardiser
from trainer.dnn.onnx_export import (
    export_onnx,
    onnx_scores,
    onnx_session,
    torch_list_scores,
    torch_scores,
)
from trainer.dnn.options import DNNOptions

N_FEATURES = 12


def raw_features(rng, n):
    """Unscaled columns (a normalisation not baked in would show) with ~10% NaN."""
    x = rng.normal(loc=50.0, scale=20.0, size=(n, N_FEATURES)).astype(np.float32)
    x[:, 3] *= 1000.0
    x[rng.random(x.shape) < 0.1] = np.nan
    return x


def make_ranker(arch, clusters=None, seed=0):
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    options = DNNOptions(arch=arch, hidden=[16, 8], embedding_dim=4, cross_layers=2)
    return build_ranker(options, fit_standardiser(raw_features(rng, 300)), clusters).eval()


@pytest.mark.parametrize(
    ("arch", "clusters"), [("mlp", None), ("dcn", None), ("mlp", 5), ("dcn", 3)]
)
def test_onnxruntime_scores_equal_pytorch_on_held_out_lists(arch, clusters):
    ranker = make_ranker(arch, clusters)
    session = onnx_session(export_onnx(ranker))
    rng = np.random.default_rng(1)
    table = None if ranker.embedding is None else ranker.embedding.weight.detach().numpy()
    for n in [1, 2, 7, 50, 1000]:
        x = raw_features(rng, n)
        user = None if table is None else table[rng.integers(len(table))]
        expected = torch_scores(ranker, x, user)
        actual = onnx_scores(session, x, user)
        assert actual.dtype == np.float32
        assert actual.shape == (n,)
        assert np.max(np.abs(actual - expected)) <= 1e-5
        np.testing.assert_array_equal(
            np.argsort(-actual, kind="stable"), np.argsort(-expected, kind="stable")
        )


def test_normalisation_and_nan_imputation_are_inside_the_graph():
    ranker = make_ranker("mlp")
    session = onnx_session(export_onnx(ranker))
    x = raw_features(np.random.default_rng(2), 20)
    x[0, :] = np.nan  # a document with nothing known scores as the average document
    got = onnx_scores(session, x)
    mean = ranker.standardiser.mean.numpy()
    with torch.no_grad():
        by_hand = ranker.body(ranker.standardiser(torch.from_numpy(x))).squeeze(-1).numpy()
        imputed = ranker.body(torch.zeros(1, N_FEATURES)).squeeze(-1).numpy()
    np.testing.assert_allclose(got, by_hand, atol=1e-5)
    np.testing.assert_allclose(got[0], imputed[0], atol=1e-5)
    np.testing.assert_allclose(onnx_scores(session, mean[None, :]), imputed, atol=1e-5)


def test_a_never_missing_feature_reads_missing_as_zero_in_both_runtimes():
    rng = np.random.default_rng(3)
    train = raw_features(rng, 300)
    train[:, 0] = np.where(rng.random(300) < 0.5, 0.0, 7.0)  # never missing: sparse zeros
    torch.manual_seed(0)
    options = DNNOptions(hidden=[16, 8])
    ranker = build_ranker(options, fit_standardiser(train), None).eval()
    session = onnx_session(export_onnx(ranker))
    x = raw_features(rng, 10)
    x[:, 0] = np.nan
    zero = x.copy()
    zero[:, 0] = 0.0
    mean = x.copy()
    mean[:, 0] = ranker.standardiser.mean[0].item()
    got = onnx_scores(session, x)
    np.testing.assert_allclose(got, torch_scores(ranker, x), atol=1e-5)
    np.testing.assert_allclose(got, onnx_scores(session, zero), atol=1e-6)
    assert not np.allclose(got, onnx_scores(session, mean), atol=1e-4)


def test_graph_is_self_contained_with_the_service_interface():
    model = onnx.load_from_string(export_onnx(make_ranker("mlp", clusters=4)))
    assert max(op.version for op in model.opset_import if op.domain in ("", "ai.onnx")) >= 17
    assert not any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)
    inputs = {i.name: i.type.tensor_type for i in model.graph.input}
    assert list(inputs) == ["features", "user"]
    assert inputs["features"].elem_type == onnx.TensorProto.FLOAT
    dims = inputs["features"].shape.dim
    assert dims[0].dim_param and dims[1].dim_value == N_FEATURES
    assert [d.dim_value for d in inputs["user"].shape.dim] == [1, 4]
    (output,) = model.graph.output
    assert output.name == "scores"
    assert len(output.type.tensor_type.shape.dim) == 1


def test_user_embedding_changes_the_scores():
    ranker = make_ranker("mlp", clusters=3)
    session = onnx_session(export_onnx(ranker))
    x = raw_features(np.random.default_rng(3), 10)
    a = onnx_scores(session, x, np.zeros(4, np.float32))
    b = onnx_scores(session, x, np.ones(4, np.float32))
    assert not np.allclose(a, b)


@pytest.mark.parametrize("arch", ["mlp", "dcn"])
def test_rows_summed_in_pytorch_score_as_the_summed_vector_in_onnxruntime(arch):
    # Cluster, field and combination rows (7 of them: 2 cluster rows, 5 shared), padding = 7:
    # training sums the rows inside the network, the service sums them before the ONNX input.
    rng = np.random.default_rng(2)
    torch.manual_seed(0)
    options = DNNOptions(arch=arch, hidden=[16, 8], embedding_dim=4, cross_layers=2)
    ranker = build_ranker(options, fit_standardiser(raw_features(rng, 300)), 7, 5).eval()
    session = onnx_session(export_onnx(ranker))
    table = ranker.table.detach().numpy()
    for rows in ([1, 2, 4, 5, 6], [0, 7, 3, 7, 7], [1, 7, 7, 7, 7]):
        x = raw_features(rng, 20)
        present = [r for r in rows if r < len(table)]
        vector = np.zeros(4, np.float32)
        for r in present:  # in column order, as EmbeddingTable.user_vector adds them
            vector += table[r]
        expected = torch_list_scores(ranker, x, np.array(rows))
        actual = onnx_scores(session, x, vector)
        assert np.max(np.abs(actual - expected)) <= 1e-5
