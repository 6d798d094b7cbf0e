"""Validation during training scores each list's user as the exported model and the service
do: a cluster row no training user kept is filled in (trainer.dnn.user_clusters.
fill_untrained_rows) before every validation pass, not only at export."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch", reason="the dnn extra (torch) is not installed")

from app.artifacts.store import load_version
from app.features.embedding_table import EmbeddingTable
from tests.support.taste_lists import graded_by_taste
from trainer.data.dataset import RankingDataset
from trainer.dnn.onnx_export import onnx_scores, onnx_session
from trainer.dnn.options import DNNOptions
from trainer.dnn.user_clusters import user_vectors
from trainer.dnn.user_profiles import read_profiles
from trainer.engines.dnn_model import train_dnn_model
from trainer.metrics.ndcg import mean_ndcg

N_DOCS = 8


def lists(seed: int, users: list[str], kinds: list[str]) -> RankingDataset:
    """One list of N_DOCS per user; users of kind `a` like feature 0, kind `b` dislike it."""
    rng = np.random.default_rng(seed)
    n = len(users)
    x = rng.normal(size=(n * N_DOCS, 3)).astype(np.float32)
    taste = np.repeat(np.where(np.array(kinds) == "a", 1.0, -1.0), N_DOCS)
    return graded_by_taste(x, taste, N_DOCS, 0.3, np.array(users))


@pytest.fixture
def untrained_cluster(tmp_path: Path) -> tuple[RankingDataset, RankingDataset, dict[str, Path]]:
    """Training users all keep a full id (`a_x`, `a_y`, `b_x`, `b_y`, 10 users each), so the
    coarser rows `a` and `b` are in the table with no training user; every validation user
    has kind `a` and no tone (`a_other`), which resolves to the untrained row `a`."""
    scheme = tmp_path / "scheme.toml"
    scheme.write_text(
        '[[fields]]\nname = "kind"\nkind = "categorical"\nvalues = ["a", "b"]\n\n'
        '[[fields]]\nname = "tone"\nkind = "categorical"\nvalues = ["x", "y"]\n'
    )
    rows = [f"u{u},{'ab'[u % 2]},{'xy'[u // 2 % 2]}" for u in range(40)]
    rows += [f"v{u},a," for u in range(30)]
    profiles = tmp_path / "profiles.csv"
    profiles.write_text("user_id,kind,tone\n" + "\n".join(rows) + "\n")
    train_users = [f"u{u}" for u in np.random.default_rng(0).permutation(200) % 40]
    train = lists(1, train_users, ["ab"[int(u[1:]) % 2] for u in train_users])
    valid = lists(2, [f"v{u}" for u in range(30)], ["a"] * 30)
    return train, valid, {"cluster_config": scheme, "user_profiles": profiles}


@pytest.mark.slow
def test_recorded_validation_ndcg_is_the_exported_models(untrained_cluster, tmp_path):
    train, valid, files = untrained_cluster
    options = DNNOptions(
        hidden=[16],
        epochs=4,
        early_stopping_rounds=None,
        threads=1,
        dropout=0.0,
        learning_rate=0.01,
        embedding_dim=4,
        min_cluster_count=5,
        combination_buckets=0,
        **files,
    )
    path = train_dnn_model(train, valid, options, tmp_path / "m" / "v1").model_dir
    artifact = load_version(path)
    counts = artifact.manifest.training["cluster_user_counts"]
    assert counts["a"] == 0 and counts["a_x"] == 10  # `a`: where validation users resolve
    table = EmbeddingTable.from_files(artifact.manifest, artifact.files)
    vectors = user_vectors(table, read_profiles(files["user_profiles"]), list(valid.user_ids))
    session = onnx_session(artifact.files["model.onnx"])
    scores = np.concatenate(
        [
            onnx_scores(session, valid.features[lo:hi], vectors[q])
            for q, (lo, hi) in enumerate(pairwise(valid.group_offsets))
        ]
    )
    served = mean_ndcg(scores, valid.labels, valid.group_offsets, 10, empty_value=1.0)
    recorded = artifact.manifest.metrics["ndcg@10"]["value"]
    assert recorded == pytest.approx(served, abs=1e-6)
