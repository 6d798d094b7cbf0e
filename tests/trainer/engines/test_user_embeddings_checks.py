"""Tree user features: the same checks of the scheme, the profile table and the network's
options as a network with user features gets, as one-line errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch", reason="the dnn extra (torch) is not installed")

from app.artifacts.manifest import ClusterScheme, UserClusters
from trainer.data.dataset import RankingDataset
from trainer.dnn.user_clusters import ClusterConfigError
from trainer.engines.user_embeddings import TreeUserOptions, user_table, with_user_vectors


def data() -> RankingDataset:
    return RankingDataset(
        features=np.zeros((4, 2), dtype=np.float32),
        labels=np.array([0.0, 1.0, 0.0, 1.0]),
        group_offsets=np.array([0, 2, 4]),
        query_ids=np.arange(2),
        user_ids=np.array(["u0", "u1"]),
    )


def test_a_reused_tables_scheme_field_missing_from_the_profiles_is_refused(tmp_path: Path):
    scheme = ClusterScheme.model_validate(
        {"fields": [{"name": "kind", "kind": "categorical", "values": ["a"]}]}
    )
    uc = UserClusters(scheme=scheme, embedding_dim=2)
    files = {
        "clusters.json": b'["unknown"]',
        "embeddings.npy": _npy(np.zeros((1, 2), np.float32)),
    }
    profiles = tmp_path / "profiles.csv"
    profiles.write_text("user_id,sort\nu0,a\nu1,b\n")
    with pytest.raises(ClusterConfigError, match="field 'kind' is not a column of the profile"):
        with_user_vectors(data(), uc, files, profiles)


def test_network_options_out_of_bounds_are_a_one_line_error(tmp_path: Path):
    options = TreeUserOptions(user_profiles=tmp_path / "p.csv", cluster_config=tmp_path / "s")
    with pytest.raises(ClusterConfigError) as info:
        user_table(data(), None, options, dnn_params={"hidden": [10**9]})
    assert str(info.value) == (
        "--hidden: a layer of 1000000000 units is wider than the 16384 allowed "
        "(in the network that learns the user table)"
    )


def _npy(array: np.ndarray) -> bytes:
    import io

    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()
