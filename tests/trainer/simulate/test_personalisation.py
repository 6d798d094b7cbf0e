"""The personalised signal is real: knowing the user's latent type ranks better than the best
user-blind guess, and only when the generator put a type effect into relevance."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from app.features.clusters import cluster_id
from trainer.data.loader import load_dataset
from trainer.dnn.user_clusters import load_cluster_scheme
from trainer.metrics.ndcg import mean_ndcg
from trainer.simulate import SimulationConfig, SimulationSummary, simulate
from trainer.simulate.users import COUNTRIES


def _oracle_ndcg(out: Path) -> tuple[float, float]:
    """NDCG@10 on train of (with type, without type) scores built from the written files."""
    truth: dict[str, Any] = json.loads((out / "truth.json").read_text())
    data = load_dataset(out / "train.parquet")
    col = {name: j for j, name in enumerate(truth["feature_names"])}
    x = data.features.astype(np.float64)
    rel, types, catalog = truth["relevance"], truth["user_types"], truth["documents"]
    users = pq.read_table(out / "users.parquet", columns=["user_id", "true_type"]).to_pydict()
    type_of = dict(zip(users["user_id"], users["true_type"], strict=True))
    assert data.user_ids is not None
    user_type = np.array([type_of[u] for u in data.user_ids])[
        np.repeat(np.arange(data.num_queries), data.group_sizes)
    ]
    category = x[:, col["category"]].astype(np.int64)
    price_z = (x[:, col["log_price"]] - catalog["price_mean"]) / catalog["price_sd"]
    base = (
        rel["w_match"] * x[:, col["tfidf_cosine"]]
        + rel["w_quality"] * (x[:, col["rating"]] - 1.0) / 4.0
    )
    affinity = np.asarray(types["category_affinity"])
    pref = np.asarray(types["price_preference"])
    weights = np.asarray(types["weights"])
    # Weight 1 for the type term, whatever the generator used, so a run without a type effect
    # shows that knowing the type does not help there.
    per_type = affinity[:, category].T - rel["price_weight"] * (price_z[:, None] - pref) ** 2
    with_type = base + per_type[np.arange(x.shape[0]), user_type]
    blind = base + per_type @ weights
    return (
        mean_ndcg(with_type, data.labels, data.group_offsets, k=10),
        mean_ndcg(blind, data.labels, data.group_offsets, k=10),
    )


def test_knowing_the_user_type_ranks_better(parquet_run: tuple[Path, SimulationSummary]) -> None:
    with_type, blind = _oracle_ndcg(parquet_run[0])
    assert with_type > blind + 0.08, (with_type, blind)


def test_without_personalisation_the_type_does_not_help(tmp_path: Path) -> None:
    config = SimulationConfig(rows=20_000, users=500, seed=7, personalization=0.0)
    simulate(config, tmp_path)
    with_type, blind = _oracle_ndcg(tmp_path)
    assert with_type < blind + 0.01, (with_type, blind)


def test_cluster_ids_track_the_latent_types(parquet_run: tuple[Path, SimulationSummary]) -> None:
    out = parquet_run[0]
    scheme = load_cluster_scheme(out / "cluster_scheme.toml")
    assert scheme.fields[0].values == list(COUNTRIES)
    table = pq.read_table(out / "users.parquet").to_pylist()
    ids = [cluster_id(scheme, row) for row in table]
    assert all(cid.count("_") == 2 for cid in ids)
    by_cluster: dict[str, list[int]] = {}
    for cid, row in zip(ids, table, strict=True):
        by_cluster.setdefault(cid, []).append(row["true_type"])
    majority = sum(np.bincount(t).max() for t in by_cluster.values()) / len(table)
    n_types = len(json.loads((out / "truth.json").read_text())["user_types"]["weights"])
    assert majority > 0.8 > 2.0 / n_types


@pytest.mark.parametrize("field", ["country", "price_level", "age"])
def test_each_profile_field_says_something_about_the_type(
    parquet_run: tuple[Path, SimulationSummary], field: str
) -> None:
    table = pq.read_table(parquet_run[0] / "users.parquet").to_pydict()
    values, types = np.asarray(table[field]), np.asarray(table["true_type"])
    if field == "age":
        values = np.digitize(values, [25, 35, 45, 55, 65])
    # Accuracy of guessing the type from this field alone beats guessing the commonest type.
    guess = 0
    for v in np.unique(values):
        guess += np.bincount(types[values == v]).max()
    assert guess / types.size > np.bincount(types).max() / types.size + 0.1
