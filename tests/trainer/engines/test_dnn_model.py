import io
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch", reason="the dnn extra (torch) is not installed")

from app.artifacts.store import load_version
from app.features.embedding_table import EmbeddingTable
from app.features.field_combinations import bucket_of
from tests.support.taste_lists import graded_by_taste
from trainer.data.dataset import RankingDataset
from trainer.data.letor import read_letor
from trainer.dnn.onnx_export import onnx_scores, onnx_session
from trainer.dnn.options import DNNOptions
from trainer.dnn.user_clusters import ClusterConfigError, user_vectors
from trainer.dnn.user_profiles import read_profiles
from trainer.engines.dnn_model import train_dnn_model
from trainer.export import ExportError
from trainer.metrics.ndcg import mean_ndcg

DEMO = Path(__file__).parents[3] / "trainer" / "demo_data"
FAST = {"hidden": [32], "epochs": 4, "early_stopping_rounds": 3, "threads": 1, "dropout": 0.0}


@pytest.fixture(scope="module")
def demo():
    train = read_letor(DEMO / "rank.train")
    return train, read_letor(DEMO / "rank.test", train.num_features)


def score_dataset(path, data, vectors=None):
    artifact = load_version(path)
    session = onnx_session(artifact.files["model.onnx"])
    parts = []
    for q in range(data.num_queries):
        lo, hi = data.group_offsets[q], data.group_offsets[q + 1]
        user = None if vectors is None else vectors[q]
        parts.append(onnx_scores(session, data.features[lo:hi], user))
    return np.concatenate(parts)


@pytest.mark.slow
def test_short_training_run_beats_random_and_writes_a_verified_version(demo, tmp_path):
    train, test = demo
    out = tmp_path / "demo-dnn" / "v1"
    path = train_dnn_model(train, test, DNNOptions(**FAST), out).model_dir
    assert path == out
    manifest = load_version(path).manifest
    assert manifest.name == "demo-dnn"
    assert manifest.kind == "lambdadnn"
    assert manifest.missing_value.handled_by == "mean_imputation"
    assert manifest.user_clusters is None
    assert set(manifest.files) == {"model.onnx"}
    assert manifest.training["engine"] == "dnn"
    assert manifest.training["params"]["loss"] == "lambdarank"
    scores = score_dataset(path, test)
    trained = mean_ndcg(scores, test.labels, test.group_offsets, 10, empty_value=1.0)
    assert manifest.metrics["ndcg@10"]["value"] == pytest.approx(trained, abs=1e-5)
    rng = np.random.default_rng(0)
    random = np.mean(
        [
            mean_ndcg(rng.random(test.num_docs), test.labels, test.group_offsets, 10)
            for _ in range(20)
        ]
    )
    assert trained > random + 0.05


def personalised_data(seed, n_queries=240, n_docs=8, n_users=60):
    """Two user types with opposite tastes for feature 0; the profile's `kind` reveals it."""
    rng = np.random.default_rng(seed)
    users = rng.integers(0, n_users, size=n_queries)
    x = rng.normal(size=(n_queries * n_docs, 4)).astype(np.float32)
    taste = np.where(users % 2 == 0, 1.0, -1.0).repeat(n_docs)
    return graded_by_taste(x, taste, n_docs, 0.5, np.array([f"u{u}" for u in users]))


@pytest.mark.slow
def test_same_seed_same_model_other_seed_other_model(tmp_path):
    train = personalised_data(3, n_queries=120)
    options = {**FAST, "epochs": 3, "early_stopping_rounds": None, "arch": "dcn", "dropout": 0.2}
    runs = [
        train_dnn_model(
            train, None, DNNOptions(**options, seed=s), tmp_path / "m" / f"v{i}"
        ).model_dir
        for i, s in enumerate([7, 7, 8])
    ]
    a, b, c = (score_dataset(p, train) for p in runs)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)


@pytest.fixture
def cluster_files(tmp_path):
    scheme = tmp_path / "scheme.toml"
    scheme.write_text('[[fields]]\nname = "kind"\nkind = "categorical"\nvalues = ["a", "b"]\n')
    profiles = tmp_path / "profiles.csv"
    rows = [f"u{u},{'ab'[u % 2]}" for u in range(60)]
    profiles.write_text("user_id,kind\n" + "\n".join(rows) + "\n")
    return {"cluster_config": scheme, "user_profiles": profiles, "embedding_dim": 2}


@pytest.mark.slow
@pytest.mark.parametrize("field_embeddings", [False, True])
def test_user_cluster_embeddings_are_exported_and_lift_ndcg(
    tmp_path, cluster_files, field_embeddings
):
    train, valid = personalised_data(1), personalised_data(2)
    base = {**FAST, "epochs": 15, "early_stopping_rounds": None, "learning_rate": 0.01}
    plain = train_dnn_model(train, valid, DNNOptions(**base), tmp_path / "m" / "plain").model_dir
    options = DNNOptions(**base, **cluster_files, field_embeddings=field_embeddings)
    with_users = train_dnn_model(train, valid, options, tmp_path / "m" / "users").model_dir
    artifact = load_version(with_users)
    uc = artifact.manifest.user_clusters
    assert uc is not None and uc.input == "onnx_input" and uc.embedding_dim == 2
    assert uc.field_embeddings is field_embeddings
    clusters = json.loads(artifact.files["clusters.json"])
    fields = ["field:kind=a", "field:kind=b"] if field_embeddings else []
    assert clusters == ["unknown", "a", "b", *fields]
    table = np.load(io.BytesIO(artifact.files["embeddings.npy"]))
    assert table.shape == (len(clusters), 2) and table.dtype == np.float32
    # The vector the service builds for each validation user.
    profiles = read_profiles(cluster_files["user_profiles"])
    vectors = user_vectors(
        EmbeddingTable.from_files(artifact.manifest, artifact.files), profiles, valid.user_ids
    )
    if field_embeddings:
        rows = np.array([1 + int(u[1:]) % 2 for u in valid.user_ids])
        np.testing.assert_allclose(vectors, table[rows] + table[rows + 2], rtol=1e-6)
    personal = mean_ndcg(
        score_dataset(with_users, valid, vectors), valid.labels, valid.group_offsets, 10
    )
    generic = mean_ndcg(score_dataset(plain, valid), valid.labels, valid.group_offsets, 10)
    assert personal > generic + 0.05


def test_refuses_an_existing_version_and_incomplete_cluster_options(tmp_path, cluster_files):
    data = personalised_data(0, n_queries=10)
    (tmp_path / "m" / "v1").mkdir(parents=True)
    with pytest.raises(ExportError, match="already exists"):
        train_dnn_model(data, None, DNNOptions(**FAST), tmp_path / "m" / "v1")
    with pytest.raises(ClusterConfigError, match="both user_profiles and cluster_config"):
        options = DNNOptions(**FAST, cluster_config=cluster_files["cluster_config"])
        train_dnn_model(data, None, options, tmp_path / "m" / "v2")
    no_users = RankingDataset(data.features, data.labels, data.group_offsets, data.query_ids)
    with pytest.raises(ClusterConfigError, match="user of every query list"):
        train_dnn_model(no_users, None, DNNOptions(**FAST, **cluster_files), tmp_path / "m" / "v3")
    assert not (tmp_path / "m" / "v2").exists() and not (tmp_path / "m" / "v3").exists()


@pytest.mark.slow
def test_combination_rows_are_exported_and_the_service_vector_matches_pytorch(tmp_path):
    scheme = tmp_path / "scheme.toml"
    scheme.write_text(
        '[[fields]]\nname = "kind"\nkind = "categorical"\nvalues = ["a", "b"]\n\n'
        '[[fields]]\nname = "tone"\nkind = "categorical"\nvalues = ["x", "y"]\n'
    )
    profiles = tmp_path / "profiles.csv"
    rows = [f"u{u},{'ab'[u % 2]},{'xy'[u // 2 % 2]}" for u in range(60)]
    profiles.write_text("user_id,kind,tone\n" + "\n".join(rows) + "\n")
    train = personalised_data(1)
    options = DNNOptions(
        **FAST,
        cluster_config=scheme,
        user_profiles=profiles,
        embedding_dim=3,
        min_cluster_count=5,
        combination_buckets=64,
    )
    path = train_dnn_model(train, None, options, tmp_path / "m" / "v1").model_dir  # parity
    artifact = load_version(path)
    uc = artifact.manifest.user_clusters
    assert uc is not None and uc.combination_buckets == 64 and uc.combination_max_fields == 3
    keys = json.loads(artifact.files["clusters.json"])
    combos = [f"field:kind={k}&field:tone={t}" for k in "ab" for t in "xy"]
    buckets = sorted({bucket_of(c, 64) for c in combos})
    assert keys[-len(buckets) :] == [f"combo:{b}" for b in buckets]
    table = EmbeddingTable.from_files(artifact.manifest, artifact.files)
    assert sorted(table.combination_index) == buckets
    # u1 (b, x): its cluster b_x, fields b and x, combination b&x, summed.
    vector = user_vectors(table, read_profiles(profiles), ["u1"])[0]
    expected = (
        table.vectors[
            [keys.index("b_x"), keys.index("field:kind=b"), keys.index("field:tone=x")]
        ].sum(axis=0)
        + table.vectors[table.combination_index[bucket_of("field:kind=b&field:tone=x", 64)]]
    )
    np.testing.assert_allclose(vector, expected, rtol=1e-6)
    # train_dnn_model checked that onnxruntime, fed such vectors, scores as PyTorch does
    # from the rows (trainer.dnn.parity); the scores depend on the combination row.
    session = onnx_session(artifact.files["model.onnx"])
    without = vector - table.vectors[table.combination_index[bucket_of(combos[2], 64)]]
    features = train.features[:8]
    assert not np.allclose(
        onnx_scores(session, features, vector), onnx_scores(session, features, without)
    )


def test_a_feature_missing_in_every_training_row_is_warned_about_and_ignored(tmp_path, capsys):
    """A trial: f5 NaN in every training row, no warning, and f5=5 in a request added -0.273
    from weights that never trained."""
    train = personalised_data(5, n_queries=40)
    features = np.concatenate(
        [train.features, np.full((train.num_docs, 1), np.nan, np.float32)], axis=1
    )
    train = RankingDataset(features, train.labels, train.group_offsets, train.query_ids)
    options = DNNOptions(**{**FAST, "epochs": 1, "early_stopping_rounds": None})
    path = train_dnn_model(train, None, options, tmp_path / "m" / "v1").model_dir
    err = capsys.readouterr().err
    assert "warning: feature 'f5' is missing (NaN) in every training row" in err
    session = onnx_session(load_version(path).files["model.onnx"])
    x = train.features[:8].copy()
    missing = onnx_scores(session, x)
    for value in (5.0, -1e6, np.inf):
        x[:, 4] = value
        np.testing.assert_array_equal(onnx_scores(session, x), missing)
    x[:, 0] += 1.0  # the others still count
    assert not np.allclose(onnx_scores(session, x), missing)
