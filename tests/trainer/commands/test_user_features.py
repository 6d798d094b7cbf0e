"""User features through the CLI alone: `ltr simulate` → `ltr train` (network or trees with
user clusters) → `ltr evaluate` with the profiles file, as the service would score."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from app.artifacts.store import load_version
from app.features.embedding_table import EmbeddingTable
from trainer.cli import app
from trainer.data.loader import load_dataset
from trainer.dataset_scoring import score_dataset
from trainer.dnn.user_clusters import user_vectors
from trainer.dnn.user_profiles import read_profiles
from trainer.metrics.report import ranking_report

from .conftest import one_error_line

NET = ["--hidden", "16", "--epochs", "3", "--batch-queries", "16", "--dropout", "0"]
USERS = ["--embedding-dim", "4", "--min-cluster-count", "5"]


def invoke(*args: object) -> str:
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sim")
    invoke("simulate", "--out", out, "--rows", "4000", "--users", "150", "--seed", "3")
    return out


@pytest.fixture(scope="module")
def network(sim: Path) -> Path:
    out = sim / "reg" / "net" / "v1"
    invoke(
        "train", "--engine", "dnn", "--train", sim / "train.parquet", "--valid",
        sim / "vali.parquet", "--out", out, "--threads", "1", *NET, *USERS,
        "--user-profiles", sim / "users.parquet", "--cluster-config", sim / "cluster_scheme.toml",
    )  # fmt: skip
    return out


def expected_report(version: Path, sim: Path) -> dict[str, float]:
    artifact = load_version(version)
    test = load_dataset(sim / "test.parquet", feature_names=artifact.manifest.request_feature_names)
    table = EmbeddingTable.from_files(artifact.manifest, artifact.files)
    assert test.user_ids is not None
    vectors = user_vectors(table, read_profiles(sim / "users.parquet"), list(test.user_ids))
    scores = score_dataset(artifact, test, vectors)
    return ranking_report(scores, test.labels, test.group_offsets)


@pytest.mark.slow
def test_evaluate_scores_a_network_with_user_clusters(sim: Path, network: Path) -> None:
    uc = load_version(network).manifest.user_clusters
    assert uc is not None and uc.field_embeddings and uc.input == "onnx_input"
    out = invoke(
        "evaluate", "--model", network, "--data", sim / "test.parquet",
        "--user-profiles", sim / "users.parquet", "--json",
    )  # fmt: skip
    report = json.loads(out)
    expected = expected_report(network, sim)
    assert report["ndcg@10"] == pytest.approx(expected["ndcg@10"], abs=1e-12)
    users = report["users"]
    assert users["lists"] == report["queries"] == users["lists_with_profile"]
    assert sum(users["resolved_to"].values()) == users["lists"]
    text = invoke(
        "evaluate", "--model", network, "--data", sim / "test.parquet",
        "--user-profiles", sim / "users.parquet",
    )  # fmt: skip
    assert "resolved to: full_cluster" in text


def test_evaluate_asks_for_the_profiles(sim: Path, network: Path, runner: CliRunner) -> None:
    result = runner.invoke(
        app, ["evaluate", "--model", str(network), "--data", str(sim / "test.parquet")]
    )
    assert result.exit_code == 2
    assert "--user-profiles" in one_error_line(result.stderr)


@pytest.mark.slow
def test_trees_reuse_a_network_table_and_score_as_evaluated(sim: Path, network: Path) -> None:
    out = sim / "reg" / "trees" / "v1"
    invoke(
        "train", "--engine", "lightgbm", "--train", sim / "train.parquet", "--valid",
        sim / "vali.parquet", "--out", out, "--num-trees", "20", "--threads", "1",
        "--user-profiles", sim / "users.parquet", "--user-embeddings-from", network,
    )  # fmt: skip
    trees, net = load_version(out), load_version(network)
    uc = trees.manifest.user_clusters
    assert uc is not None and uc.input == "features" and uc.field_embeddings
    assert trees.manifest.feature_names[-4:] == [f"user_emb_{i}" for i in range(4)]
    for name in ("clusters.json", "embeddings.npy"):
        assert trees.files[name] == net.files[name]
    assert trees.manifest.training["user_embeddings_from"] == "default/v1"
    evaluate = ["evaluate", "--model", out, "--data", sim / "test.parquet", "--json"]
    report = json.loads(invoke(*evaluate, "--user-profiles", sim / "users.parquet"))
    assert report["ndcg@10"] == pytest.approx(expected_report(out, sim)["ndcg@10"], abs=1e-12)
    # The trees split on the user columns: scores change with the user.
    test = load_dataset(sim / "test.parquet")
    first = test.features[test.group_offsets[0] : test.group_offsets[1]]
    from app.scoring.loader import load_scorer

    scorer = load_scorer(trees)
    table = np.load(sim / "reg" / "net" / "v1" / "embeddings.npy")
    a = scorer.score(np.hstack([first, np.repeat(table[:1], len(first), axis=0)]))
    b = scorer.score(np.hstack([first, np.repeat(table[-1:] * 5, len(first), axis=0)]))
    assert not np.allclose(a, b)


@pytest.mark.slow
def test_native_trees_learn_their_own_table(sim: Path) -> None:
    out = sim / "reg" / "learned" / "v1"
    invoke(
        "train", "--engine", "native", "--train", sim / "train.parquet", "--valid",
        sim / "vali.parquet", "--out", out, "--num-trees", "10", "--threads", "1", *NET, *USERS,
        "--no-field-embeddings", "--user-profiles", sim / "users.parquet",
        "--cluster-config", sim / "cluster_scheme.toml",
    )  # fmt: skip
    manifest = load_version(out).manifest
    uc = manifest.user_clusters
    assert uc is not None and uc.input == "features" and not uc.field_embeddings
    assert uc.embedding_dim == 4
    assert manifest.training["user_embedding_network"]["epochs"] == 3


def test_tree_user_options_are_checked(sim: Path, runner: CliRunner, tmp_path: Path) -> None:
    base = ["train", "--train", str(sim / "train.parquet"), "--out", str(tmp_path / "m" / "v1")]
    result = runner.invoke(app, [*base, "--epochs", "3"])
    assert result.exit_code == 2
    assert "--epochs does not apply" in one_error_line(result.stderr)
    result = runner.invoke(app, [*base, "--cluster-config", str(sim / "cluster_scheme.toml")])
    assert result.exit_code == 2
    assert "--user-profiles" in one_error_line(result.stderr)
    result = runner.invoke(
        app,
        [*base, "--user-profiles", str(sim / "users.parquet"), "--user-embeddings-from",
         str(sim / "train.parquet")],
    )  # fmt: skip
    assert result.exit_code == 2
    assert not (tmp_path / "m" / "v1").exists()


@pytest.mark.parametrize("engine", ["native", "dnn"])
def test_combination_buckets_without_field_embeddings_are_refused(
    sim: Path, runner: CliRunner, tmp_path: Path, engine: str
) -> None:
    """Combination rows are sums of field rows: asked for without them they were dropped."""
    out = tmp_path / "m" / "v1"
    base = [
        "train", "--engine", engine, "--train", str(sim / "train.parquet"), "--out", str(out),
        "--user-profiles", str(sim / "users.parquet"), "--no-field-embeddings",
    ]  # fmt: skip
    result = runner.invoke(app, [*base, "--combination-buckets", "1024"])
    assert result.exit_code == 2
    line = one_error_line(result.stderr)
    assert "--combination-buckets" in line and "--field-embeddings" in line
    assert not out.exists()
    config = tmp_path / "params.toml"
    config.write_text("field_embeddings = false\ncombination_buckets = 64\n")
    result = runner.invoke(app, [*base[:-1], "--config", str(config)])
    assert result.exit_code == 2
    assert f"{config}:2: combination_buckets" in one_error_line(result.stderr)
