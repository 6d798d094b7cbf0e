"""`train_dnn_model`'s checks of the user inputs and what it tells the user about them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch", reason="the dnn extra (torch) is not installed")

from app.artifacts.store import load_version
from trainer.data.dataset import RankingDataset
from trainer.dnn.options import DNNOptions
from trainer.dnn.user_clusters import ClusterConfigError
from trainer.engines.dnn_model import train_dnn_model

TINY = {"hidden": [4], "epochs": 1, "threads": 1, "dropout": 0.0, "embedding_dim": 2}


def tiny_data(n_queries: int = 12, n_docs: int = 4) -> RankingDataset:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n_queries * n_docs, 3)).astype(np.float32)
    x[::5, 2] = np.nan  # feature 2 has missing values, 0 and 1 never
    return RankingDataset(
        features=x,
        labels=rng.integers(0, 3, size=n_queries * n_docs).astype(np.float64),
        group_offsets=np.arange(0, n_queries * n_docs + 1, n_docs, dtype=np.int64),
        query_ids=np.arange(n_queries),
        user_ids=np.array([f"u{q % 6}" for q in range(n_queries)]),
    )


@pytest.fixture
def user_files(tmp_path: Path) -> dict[str, Path]:
    scheme = tmp_path / "scheme.toml"
    scheme.write_text('[[fields]]\nname = "kind"\nkind = "categorical"\nvalues = ["a", "b"]\n')
    profiles = tmp_path / "profiles.csv"
    profiles.write_text("user_id,kind\n" + "\n".join(f"u{u},{'ab'[u % 2]}" for u in range(6)))
    return {"cluster_config": scheme, "user_profiles": profiles}


def test_a_scheme_field_missing_from_the_profile_table_is_refused(tmp_path, user_files):
    user_files["user_profiles"].write_text("user_id,sort\nu0,a\n")
    options = DNNOptions(**TINY, **user_files)
    with pytest.raises(ClusterConfigError, match="field 'kind' is not a column of the profile"):
        train_dnn_model(tiny_data(), None, options, tmp_path / "m" / "v1")
    assert not (tmp_path / "m" / "v1").exists()


class Sink:
    def __init__(self) -> None:
        self.messages: list[str] = []

    def update(self, iteration, train_metric=None, valid_metric=None) -> None:
        pass

    def message(self, text: str) -> None:
        self.messages.append(text)


def test_users_all_in_unknown_are_a_warning_on_the_progress_display(tmp_path, user_files):
    # 3 users per kind, min 20: every training user ends in `unknown`.
    sink = Sink()
    options = DNNOptions(**TINY, **user_files, min_cluster_count=20)
    train_dnn_model(tiny_data(), None, options, tmp_path / "m" / "v1", sink)
    warnings = [m for m in sink.messages if m.startswith("warning: user features carry little")]
    assert len(warnings) == 1 and "100% of the 6 training users" in warnings[0]


def test_without_a_display_the_warning_goes_to_stderr(tmp_path, user_files, capsys):
    options = DNNOptions(**TINY, **user_files, min_cluster_count=20)
    train_dnn_model(tiny_data(), None, options, tmp_path / "m" / "v1")
    assert "warning: user features carry little: 100%" in capsys.readouterr().err
    options = DNNOptions(**TINY, **user_files, min_cluster_count=3)
    train_dnn_model(tiny_data(), None, options, tmp_path / "m" / "v2")
    assert "warning" not in capsys.readouterr().err


def test_the_manifest_names_the_features_imputed_with_their_mean(tmp_path):
    path = train_dnn_model(tiny_data(), None, DNNOptions(**TINY), tmp_path / "m" / "v1").model_dir
    training = load_version(path).manifest.training
    assert training["mean_imputed_features"] == [tiny_data().names()[2]]
