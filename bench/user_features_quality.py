"""Ranking quality with and without user information, on `ltr simulate` and on the
combination-effects generator (bench.generate_personal): the pieces of
`bench.bench_user_features --part quality`.

Every model is trained and scored with the product's own code paths: `train_dnn_model`
(`ltr train --engine dnn`), `train_tree_model` with `with_user_vectors` (`ltr train --engine
lightgbm --user-profiles ...`), and the test set scored through the service's scorer with the
vector the service computes for each user (`ltr evaluate --user-profiles`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from app.artifacts.manifest import ClusterScheme
from app.artifacts.store import load_version
from app.features.clusters import field_token
from app.features.embedding_table import EmbeddingTable
from bench.generate_personal import ORDERS, generate
from trainer.data.dataset import RankingDataset
from trainer.data.loader import load_dataset
from trainer.dataset_scoring import score_dataset
from trainer.dnn.user_clusters import load_cluster_scheme, user_vectors
from trainer.dnn.user_profiles import read_profiles
from trainer.metrics.ndcg import mean_ndcg

GENERATORS = ("simulate", "combo")
# Same budget for every network: the user table is the only difference between rows.
DNN = {"hidden": [128, 64], "epochs": 40, "early_stopping_rounds": 8, "threads": 1}
USER = {"embedding_dim": 32, "min_cluster_count": 20}
TREES = {"num_trees": 300, "num_leaves": 31, "learning_rate": 0.05, "threads": 1}
TREES_STOP = 30
RESEED = 1000  # added to the seed for the noise-floor row's training
# `ltr simulate`'s shipped scheme is country, age, price_level; the other order reverses it.
SIM_ORDER_B = ("price_level", "age", "country")
ROWS = (
    ("lambdamart", "LambdaMART, no user information"),
    ("dnn", "DNN, no user information"),
    ("dnn_clusters_A", "DNN + cluster embedding only (before), order A"),
    ("dnn_clusters_B", "DNN + cluster embedding only (before), order B"),
    ("dnn_fields_A", "DNN + cluster + field rows (before), order A"),
    ("dnn_fields_B", "DNN + cluster + field rows (before), order B"),
    ("dnn_user_A", "DNN + user features (cluster + field + combination rows), order A"),
    ("dnn_user_B", "DNN + user features (cluster + field + combination rows), order B"),
    ("dnn_user_A_reseeded", "same as order A, another training seed (the noise floor)"),
    ("lambdamart_user_A", "LambdaMART + user features (learned table), order A"),
    ("lambdamart_onehot", "LambdaMART + profile fields one-hot"),
    ("dnn_onehot", "DNN + profile fields one-hot"),
)


@dataclass(frozen=True)
class Prepared:
    root: Path
    train: RankingDataset
    valid: RankingDataset
    test: RankingDataset
    profiles: Path
    schemes: dict[str, Path]  # "A", "B" → scheme TOML


def prepare(generator: str, seed: int, rows: int, users: int, root: Path) -> Prepared:
    """The dataset, its profile table and the scheme in two field orders."""
    data = root / f"{generator}-{seed}"
    if generator == "simulate":
        from trainer.simulate import SimulationConfig, simulate

        simulate(SimulationConfig(rows=rows, users=users, seed=seed), data)
        shipped = data / "cluster_scheme.toml"
        scheme = load_cluster_scheme(shipped)
        by_name = {f.name: f for f in scheme.fields}
        reordered = scheme.model_copy(update={"fields": [by_name[n] for n in SIM_ORDER_B]})
        other = data / "scheme_reversed.toml"
        other.write_text(_toml(reordered))
        schemes, profiles = {"A": shipped, "B": other}, data / "users.parquet"
    else:
        generate(data, rows=rows, users=users, seed=seed)
        names = list(ORDERS)
        schemes = {"A": data / f"scheme_{names[0]}.toml", "B": data / f"scheme_{names[1]}.toml"}
        profiles = data / "users.csv"
    train = load_dataset(data / "train.parquet")
    valid = load_dataset(data / "vali.parquet", feature_names=train.names())
    test = load_dataset(data / "test.parquet", feature_names=train.names())
    return Prepared(data, train, valid, test, profiles, schemes)


def _toml(scheme: ClusterScheme) -> str:
    parts = [f'separator = "{scheme.separator}"', f'unknown = "{scheme.unknown}"', ""]
    for f in scheme.fields:
        parts += ["[[fields]]", f'name = "{f.name}"', f'kind = "{f.kind}"']
        if f.prefix:
            parts.append(f'prefix = "{f.prefix}"')
        if f.values:
            parts.append("values = [" + ", ".join(f'"{v}"' for v in f.values) + "]")
        if f.edges:
            parts.append("edges = [" + ", ".join(repr(e) for e in f.edges) + "]")
        parts.append("")
    return "\n".join(parts)


def one_hot(
    data: RankingDataset, scheme: ClusterScheme, profiles: dict[str, Any]
) -> RankingDataset:
    """`data` with the scheme's bucketised profile fields one-hot (one column per field token
    any profile has), the same for every document of a list."""
    vocab = sorted(
        {
            (i, field_token(f, p.get(f.name)))
            for p in profiles.values()
            for i, f in enumerate(scheme.fields)
        }
    )
    column = {v: j for j, v in enumerate(vocab)}
    per_query = np.zeros((data.num_queries, len(vocab)), np.float32)
    assert data.user_ids is not None
    for q, user in enumerate(data.user_ids):
        profile = profiles.get(str(user)) or {}
        for i, f in enumerate(scheme.fields):
            j = column.get((i, field_token(f, profile.get(f.name))))
            if j is not None:
                per_query[q, j] = 1.0
    extra = np.repeat(per_query, data.group_sizes, axis=0)
    return RankingDataset(
        features=np.ascontiguousarray(np.hstack([data.features, extra]), dtype=np.float32),
        labels=data.labels,
        group_offsets=data.group_offsets,
        query_ids=data.query_ids,
        feature_names=[*data.names(), *(f"profile_{i}_{t}" for i, t in vocab)],
        source=data.source,
        user_ids=data.user_ids,
    )


def _ndcg(path: Path, test: RankingDataset, profiles: dict[str, Any] | None) -> float:
    artifact = load_version(path)
    vectors = None
    if artifact.manifest.user_clusters is not None:
        assert profiles is not None and test.user_ids is not None
        table = EmbeddingTable.from_files(artifact.manifest, artifact.files)
        vectors = user_vectors(table, profiles, list(test.user_ids))
    scores = score_dataset(artifact, test, vectors)
    return float(mean_ndcg(scores, test.labels, test.group_offsets, 10, empty_value=1.0))


def run_seed(
    generator: str,
    seed: int,
    rows: int,
    users: int,
    root: Path,
    only: frozenset[str] | None = None,
) -> dict[str, Any]:
    """Test NDCG@10 of every row of ROWS (or of those in `only`), and seconds per row, for one
    dataset. The versions stay under `root/models` (the serving part publishes some of them)."""
    from trainer.dnn.options import DNNOptions
    from trainer.engines.dnn_model import train_dnn_model
    from trainer.engines.tree_model import train_tree_model
    from trainer.engines.user_embeddings import with_user_vectors
    from trainer.lambdamart.params import LambdaMARTParams

    p = prepare(generator, seed, rows, users, root)
    profiles = read_profiles(p.profiles)
    models = root / "models" / f"{generator}-{seed}"
    ndcg: dict[str, float] = {}
    seconds: dict[str, float] = {}

    def wanted(name: str) -> bool:
        return only is None or name in only

    def dnn(
        name: str,
        extra: dict[str, Any],
        train: RankingDataset,
        valid: RankingDataset,
        test: RankingDataset,
    ) -> Path:
        if not wanted(name) and (models / name / "v1").exists():
            return models / name / "v1"
        shutil.rmtree(models / name, ignore_errors=True)  # an earlier run's version
        started = time.perf_counter()
        options = DNNOptions(**{**DNN, "seed": seed, **extra})
        path = train_dnn_model(train, valid, options, models / name / "v1").model_dir
        ndcg[name] = _ndcg(path, test, profiles)
        seconds[name] = time.perf_counter() - started
        print(
            f"{generator} seed {seed} {name}: {ndcg[name]:.4f} ({seconds[name]:.0f} s)", flush=True
        )
        return path

    def trees(
        name: str, train: RankingDataset, valid: RankingDataset, test: RankingDataset, **user: Any
    ) -> Path:
        shutil.rmtree(models / name, ignore_errors=True)
        started = time.perf_counter()
        params = LambdaMARTParams(**TREES, seed=seed, early_stopping_rounds=TREES_STOP)
        path = train_tree_model(
            "lightgbm", train, valid, params, models / name / "v1", name=name, **user
        ).model_dir
        ndcg[name] = _ndcg(path, test, profiles)
        seconds[name] = time.perf_counter() - started
        print(
            f"{generator} seed {seed} {name}: {ndcg[name]:.4f} ({seconds[name]:.0f} s)", flush=True
        )
        return path

    if wanted("lambdamart"):
        trees("lambdamart", p.train, p.valid, p.test)
    if wanted("dnn"):
        dnn("dnn", {}, p.train, p.valid, p.test)
    for order in ("A", "B"):
        users_opts = {**USER, "user_profiles": p.profiles, "cluster_config": p.schemes[order]}
        if wanted(f"dnn_clusters_{order}"):
            no_fields = {**users_opts, "field_embeddings": False}
            dnn(f"dnn_clusters_{order}", no_fields, p.train, p.valid, p.test)
        if wanted(f"dnn_fields_{order}"):
            no_combinations = {**users_opts, "combination_buckets": 0}
            dnn(f"dnn_fields_{order}", no_combinations, p.train, p.valid, p.test)
        net = dnn(f"dnn_user_{order}", users_opts, p.train, p.valid, p.test)
        if order == "A" and wanted("dnn_user_A_reseeded"):
            # Same data and field order, other initial weights, dropout and batch order: how
            # far two trainings of one model apart are, to read the field-order gap against.
            reseeded = {**users_opts, "seed": seed + RESEED}
            dnn("dnn_user_A_reseeded", reseeded, p.train, p.valid, p.test)
        if order == "A" and wanted("lambdamart_user_A"):
            artifact = load_version(net)
            uc = artifact.manifest.user_clusters
            assert uc is not None
            files = {k: artifact.files[k] for k in (uc.clusters_file, uc.embeddings_file)}
            uc = uc.model_copy(update={"input": "features"})
            tr, va = (with_user_vectors(d, uc, files, p.profiles) for d in (p.train, p.valid))
            te = p.test  # scored with the user vectors by _ndcg, as ltr evaluate does
            trees("lambdamart_user_A", tr, va, te, user_clusters=uc, user_files=files)
    scheme = load_cluster_scheme(p.schemes["A"])
    tr, va, te = (one_hot(d, scheme, profiles) for d in (p.train, p.valid, p.test))
    if wanted("lambdamart_onehot"):
        trees("lambdamart_onehot", tr, va, te)
    if wanted("dnn_onehot"):
        dnn("dnn_onehot", {}, tr, va, te)
    return {
        "ndcg": ndcg,
        "seconds": seconds,
        "queries": [p.train.num_queries, p.valid.num_queries, p.test.num_queries],
    }


DEFAULT_ROWS = 24_000
DEFAULT_USERS = 1_500
WORK = Path(tempfile.gettempdir()) / "ltr-bench-user-features"
SERVING_CANDIDATES = 300
SERVING_REQUESTS = 1000
SERVING_TREES = 200


def settings(rows: int, users: int) -> dict[str, Any]:
    return {"rows": rows, "users": users, "dnn": DNN, "user": USER, "trees": TREES}


def quality(
    generator: str,
    seeds: int,
    rows: int,
    users: int,
    only: frozenset[str] | None = None,
    previous: dict[str, Any] | None = None,
    work: Path = WORK,
) -> dict[str, Any]:
    """run_seed for seeds 0..seeds-1; versions stay under `work` (WORK: for the serving part).

    With `only`, just those rows are measured and the other rows' figures are carried over
    from `previous` (the same settings' earlier figures), each run listing what it carried."""
    runs = [run_seed(generator, seed, rows, users, work, only) for seed in range(seeds)]
    if only is not None and previous is not None:
        if previous["settings"] != settings(rows, users):
            raise ValueError("the earlier figures were measured with other settings")
        for run, old in zip(runs, previous["runs"], strict=True):
            carried = sorted(set(old["ndcg"]) - set(run["ndcg"]))
            for kind in ("ndcg", "seconds"):
                run[kind] = {**{k: old[kind][k] for k in carried}, **run[kind]}
            run["carried_over"] = sorted({*carried, *old.get("carried_over", [])} - set(only))
    return {"generator": generator, "settings": settings(rows, users), "runs": runs}


def _same_size_trees(p: Prepared, models: Path) -> None:
    """Two tree models of SERVING_TREES trees each (no early stopping), without and with the
    learned user vector, so that on/off differ by the user features only."""
    from trainer.engines.tree_model import train_tree_model
    from trainer.engines.user_embeddings import with_user_vectors
    from trainer.lambdamart.params import LambdaMARTParams

    params = LambdaMARTParams(**{**TREES, "num_trees": SERVING_TREES})
    artifact = load_version(models / "dnn_user_A" / "v1")
    uc = artifact.manifest.user_clusters
    assert uc is not None
    files = {k: artifact.files[k] for k in (uc.clusters_file, uc.embeddings_file)}
    uc = uc.model_copy(update={"input": "features"})
    on = [with_user_vectors(d, uc, files, p.profiles) for d in (p.train, p.valid)]
    for name in ("trees_off", "trees_on"):
        shutil.rmtree(models / name, ignore_errors=True)
    train_tree_model("lightgbm", p.train, None, params, models / "trees_off" / "v1", name="off")
    train_tree_model(
        "lightgbm", on[0], None, params, models / "trees_on" / "v1", name="on",
        user_clusters=uc, user_files=files,
    )  # fmt: skip


def serving(rows: int, users: int) -> dict[str, Any]:
    """p50/p99 ms of POST /rerank, 300 candidates, on the real service: user features on vs
    off for the network and for the trees of the combination generator's seed 0 (trained by
    the quality part, or here when missing), requests alternating between the two."""
    import httpx
    import orjson

    from app.artifacts.store import set_current
    from tests.support.uvicorn_server import UvicornServer
    from trainer.publish import install_version

    models = WORK / "models" / "combo-0"
    if not (models / "dnn_user_A" / "v1").exists():
        run_seed("combo", 0, rows, users, WORK)
    p = prepare("combo", 0, rows, users, WORK)
    profiles = read_profiles(p.profiles)
    registry = WORK / "registry"
    shutil.rmtree(registry, ignore_errors=True)
    _same_size_trees(p, models)
    pairs = {"dnn": ("dnn", "dnn_user_A"), "lambdamart": ("trees_off", "trees_on")}
    for off, on in pairs.values():
        for name in (off, on):
            artifact = install_version(models / name / "v1", registry, name)
            set_current(registry, name, artifact.manifest.version)
    rng = np.random.default_rng(0)
    rows_idx = rng.integers(0, p.test.num_docs, SERVING_CANDIDATES)
    features = [[float(v) for v in row] for row in p.test.features[rows_idx]]
    user = str(p.test.user_ids[0]) if p.test.user_ids is not None else ""
    profile = {k: v for k, v in profiles.get(user, {}).items() if v is not None}

    def body(model: str) -> bytes:
        return orjson.dumps(
            {
                "model": model,
                "user": {"id": user, "profile": profile},
                "candidates": [{"id": f"d{i}", "features": f} for i, f in enumerate(features)],
            }
        )

    out: dict[str, Any] = {"candidates": SERVING_CANDIDATES, "requests": SERVING_REQUESTS}
    out["load_average_before"] = os.getloadavg()[0]
    env = {"LTR_REGISTRY": str(registry), "LTR_RELOAD_POLL_SECONDS": "0"}
    server = UvicornServer(env).start().wait_ready()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            for engine, (off, on) in pairs.items():
                bodies = {off: body(off), on: body(on)}
                times: dict[str, list[float]] = {off: [], on: []}
                for i in range(SERVING_REQUESTS + 20):
                    for name in (off, on) if i % 2 else (on, off):
                        t0 = time.perf_counter()
                        resp = client.post("/rerank", content=bodies[name])
                        elapsed = (time.perf_counter() - t0) * 1e3
                        resp.raise_for_status()
                        if i >= 20:  # warm-up
                            times[name].append(elapsed)
                out[engine] = {
                    "off_p50": float(np.percentile(times[off], 50)),
                    "off_p99": float(np.percentile(times[off], 99)),
                    "on_p50": float(np.percentile(times[on], 50)),
                    "on_p99": float(np.percentile(times[on], 99)),
                }
                out[engine]["ratio_p50"] = out[engine]["on_p50"] / out[engine]["off_p50"]
                print(engine, out[engine], flush=True)
    finally:
        server.stop()
    out["load_average_after"] = os.getloadavg()[0]
    return out
