"""LambdaDNN benchmarks: quality on MQ2008, user-cluster embeddings on simulated personalised
data, training throughput, and ONNX scoring latency.

    .venv/bin/python -m bench.bench_dnn [--part mq2008|simulated|throughput|scoring|all]
                                        [--folds 1,2,3,4,5] [--seeds 0,1,2] [--sim-rows 220000]

Each part stores its figures in bench/results/dnn.json; bench/results/dnn.md is rendered from
all stored parts, so parts can run at different times. NDCG@10: gain 2^label - 1, a query with no
relevant document scores 1 (LightGBM's convention).
"""

from __future__ import annotations

import argparse
import io
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.dnn_config import (
    LAMBDAMART_MQ,
    LAMBDAMART_SIM,
    LOSSES,
    MQ_OPTIONS,
    QUALITY_THREADS,
    SIM_OPTIONS,
    THROUGHPUT_THREADS,
)
from bench.dnn_report import render
from trainer.data.dataset import RankingDataset
from trainer.data.loader import load_dataset
from trainer.metrics.ndcg import mean_ndcg

ROOT = Path(__file__).resolve().parents[1]
THROUGHPUT_LISTS = 2000
MQ2008 = ROOT / ".." / "shared" / "datasets" / "mq2008"
RESULTS_JSON = ROOT / "bench" / "results" / "dnn.json"
RESULTS_MD = ROOT / "bench" / "results" / "dnn.md"


def ndcg10(scores: np.ndarray, data: RankingDataset) -> float:
    return float(mean_ndcg(scores, data.labels, data.group_offsets, 10, empty_value=1.0))


def lambdamart_scores(
    train: RankingDataset, valid: RankingDataset, tests: list[RankingDataset], cfg: dict
) -> list[np.ndarray]:
    from app.scoring.reference import predict
    from trainer.lambdamart import LambdaMARTParams
    from trainer.lambdamart import train as train_lambdamart

    params = LambdaMARTParams(
        num_trees=cfg["num_trees"],
        num_leaves=cfg["num_leaves"],
        learning_rate=cfg["learning_rate"],
        early_stopping_rounds=cfg["stop"],
        eval_at=10,
        threads=QUALITY_THREADS,
    )
    result = train_lambdamart(train, params, valid)
    return [predict(result.ensemble, t.features) for t in tests]


def dnn_run(
    train: RankingDataset, valid: RankingDataset, options: dict, out: Path
) -> tuple[Path, dict[str, Any]]:
    from trainer.dnn.options import DNNOptions
    from trainer.engines.dnn_model import train_dnn_model

    path = train_dnn_model(train, valid, DNNOptions(**options), out).model_dir
    manifest = json.loads((path / "manifest.json").read_text())
    return path, manifest["training"]


def onnx_dataset_scores(path: Path, data: RankingDataset, rows: np.ndarray | None) -> np.ndarray:
    """Score every list of `data` through the exported model, one list per call, as served."""
    from trainer.dnn.onnx_export import onnx_scores, onnx_session

    session = onnx_session((path / "model.onnx").read_bytes(), threads=1)
    table = None
    if rows is not None:
        table = np.load(io.BytesIO((path / "embeddings.npy").read_bytes()))
    out = []
    for q in range(data.num_queries):
        lo, hi = data.group_offsets[q], data.group_offsets[q + 1]
        user = None if table is None or rows is None else table[rows[q]]
        out.append(onnx_scores(session, data.features[lo:hi], user))
    return np.concatenate(out).astype(np.float64)


def part_mq2008(folds: list[int]) -> dict[str, Any]:
    per_fold: dict[str, list[float]] = {name: [] for name in (*LOSSES, "lambdamart")}
    seconds: dict[str, float] = dict.fromkeys(per_fold, 0.0)
    epochs: dict[str, list[int]] = {name: [] for name in LOSSES}
    for fold in folds:
        base = MQ2008 / f"Fold{fold}"
        tr = load_dataset(base / "train.txt")
        va = load_dataset(base / "vali.txt", num_features=tr.num_features)
        te = load_dataset(base / "test.txt", num_features=tr.num_features)
        started = time.perf_counter()
        (scores,) = lambdamart_scores(tr, va, [te], LAMBDAMART_MQ)
        seconds["lambdamart"] += time.perf_counter() - started
        per_fold["lambdamart"].append(ndcg10(scores, te))
        for loss in LOSSES:
            with tempfile.TemporaryDirectory() as tmp:
                started = time.perf_counter()
                path, training = dnn_run(tr, va, {**MQ_OPTIONS, "loss": loss}, Path(tmp) / "v")
                seconds[loss] += time.perf_counter() - started
                per_fold[loss].append(ndcg10(onnx_dataset_scores(path, te, None), te))
                epochs[loss].append(int(training["best_epoch"]))
        print(f"fold {fold}: " + ", ".join(f"{k} {v[-1]:.4f}" for k, v in per_fold.items()))
    return {"folds": folds, "ndcg10": per_fold, "seconds": seconds, "best_epochs": epochs}


def _simulated(seed: int, rows: int, root: Path) -> Path:
    from trainer.simulate import SimulationConfig, simulate

    out = root / f"sim{seed}"
    simulate(SimulationConfig(rows=rows, seed=seed), out)
    return out


def _users(data: RankingDataset) -> list[str]:
    assert data.user_ids is not None, "simulated data carries user ids"
    return [str(u) for u in data.user_ids]


def part_simulated_seed(seed: int, rows: int) -> dict[str, Any]:
    """Test NDCG@10 of the four models on one simulated dataset."""
    from app.artifacts.manifest import ClusterScheme
    from trainer.dnn.user_clusters import (
        append_user_embeddings,
        cluster_rows,
        fine_cluster_ids,
    )
    from trainer.dnn.user_profiles import read_profiles

    result: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        sim = _simulated(seed, rows, Path(tmp))
        tr = load_dataset(sim / "train.parquet")
        va = load_dataset(sim / "vali.parquet", feature_names=tr.names())
        te = load_dataset(sim / "test.parquet", feature_names=tr.names())
        plain, _ = dnn_run(tr, va, {**SIM_OPTIONS, "seed": seed}, Path(tmp) / "plain")
        result["mlp"] = ndcg10(onnx_dataset_scores(plain, te, None), te)
        cluster_opts = {
            **SIM_OPTIONS,
            "seed": seed,
            "user_profiles": sim / "users.parquet",
            "cluster_config": sim / "cluster_scheme.toml",
        }
        personal, _ = dnn_run(tr, va, cluster_opts, Path(tmp) / "personal")
        manifest = json.loads((personal / "manifest.json").read_text())
        scheme = ClusterScheme.model_validate(manifest["user_clusters"]["scheme"])
        clusters = json.loads((personal / "clusters.json").read_text())
        table = np.load(personal / "embeddings.npy")
        profiles = read_profiles(sim / "users.parquet")
        user_rows = [
            cluster_rows(scheme, clusters, fine_cluster_ids(scheme, profiles, _users(d)))
            for d in (tr, va, te)
        ]
        result["mlp+clusters"] = ndcg10(onnx_dataset_scores(personal, te, user_rows[2]), te)
        sets = [
            append_user_embeddings(d, clusters, table, r)
            for d, r in zip((tr, va, te), user_rows, strict=True)
        ]
        (s_plain,) = lambdamart_scores(tr, va, [te], LAMBDAMART_SIM)
        (s_emb,) = lambdamart_scores(sets[0], sets[1], [sets[2]], LAMBDAMART_SIM)
        result["lambdamart"] = ndcg10(s_plain, te)
        result["lambdamart+embeddings"] = ndcg10(s_emb, te)
    print(f"seed {seed}: " + ", ".join(f"{k} {v:.4f}" for k, v in result.items()), flush=True)
    return {
        "ndcg10": result,
        "train_rows": tr.num_docs,
        "total_rows": tr.num_docs + va.num_docs + te.num_docs,
        "train_queries": tr.num_queries,
        "test_queries": te.num_queries,
        "clusters": len(clusters),
    }


def part_throughput(rows: int) -> dict[str, Any]:
    import torch

    from trainer.dnn.batching import QueryLists
    from trainer.dnn.losses import loss_for
    from trainer.dnn.models import build_ranker
    from trainer.dnn.normalisation import fit_standardiser
    from trainer.dnn.options import DNNOptions
    from trainer.dnn.trainer_loop import deterministic, train_ranker

    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        full = load_dataset(_simulated(0, rows, Path(tmp)) / "train.parquet")
    tr = full.subset_queries(np.arange(min(THROUGHPUT_LISTS, full.num_queries)))
    lists = QueryLists(tr.features, tr.labels, tr.group_offsets)
    for threads in THROUGHPUT_THREADS:
        for arch in ("mlp", "dcn"):
            for loss in LOSSES:
                options = DNNOptions(
                    **{
                        **SIM_OPTIONS,
                        "epochs": 1,
                        "early_stopping_rounds": None,
                        "batch_queries": 32,
                        "loss": loss,
                        "arch": arch,
                        "threads": threads,
                    }
                )
                with deterministic(0, threads):
                    ranker = build_ranker(options, fit_standardiser(tr.features))
                    result = train_ranker(ranker, loss_for(options), lists, tr.labels, options)
                key = f"{arch}/{loss}/{threads}"
                out[key] = result.lists_per_second
                print(f"{key}: {result.lists_per_second:.0f} lists/s", flush=True)
    return {
        "lists_per_second": out,
        "train_queries": tr.num_queries,
        "mean_list_len": float(tr.group_sizes.mean()),
        "torch": torch.__version__,
    }


def part_scoring(repeats: int = 2000) -> dict[str, Any]:
    import torch

    from trainer.dnn.models import build_ranker
    from trainer.dnn.normalisation import fit_standardiser
    from trainer.dnn.onnx_export import export_onnx, onnx_session
    from trainer.dnn.options import DNNOptions

    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    x = rng.normal(size=(1000, 136)).astype(np.float32)
    ranker = build_ranker(DNNOptions(hidden=[256, 128], dropout=0.0), fit_standardiser(x)).eval()
    session = onnx_session(export_onnx(ranker), threads=1)
    feeds = {"features": x}

    def timed(fn: Any) -> list[float]:
        for _ in range(50):
            fn()
        samples = []
        for _ in range(repeats):
            started = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - started)
        return samples

    ort_times = timed(lambda: session.run(["scores"], feeds))  # type: ignore[attr-defined]
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    xt = torch.from_numpy(x)
    with torch.inference_mode():
        torch_times = timed(lambda: ranker.score_list(xt))
    torch.set_num_threads(previous)

    def summary(t: list[float]) -> dict[str, float]:
        q = np.percentile(np.array(t) * 1e6, [50, 99])
        return {"p50_us": float(q[0]), "p99_us": float(q[1])}

    return {"onnxruntime": summary(ort_times), "torch": summary(torch_times), "docs": 1000}


def _store(part: str, value: dict[str, Any], key: str | None = None) -> None:
    """Merge one result into dnn.json (re-read first: parts may run in parallel processes)
    and re-render dnn.md."""
    stored = json.loads(RESULTS_JSON.read_text()) if RESULTS_JSON.is_file() else {}
    if key is None:
        stored[part] = value
    else:
        stored.setdefault(part, {})[key] = value
    RESULTS_JSON.parent.mkdir(parents=True, exist_ok=True)
    RESULTS_JSON.write_text(json.dumps(stored, indent=1) + "\n")
    RESULTS_MD.write_text(render(stored))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", default="all")
    parser.add_argument("--folds", default="1,2,3,4,5")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--sim-rows", type=int, default=220_000)
    args = parser.parse_args()
    parts = ["mq2008", "simulated", "throughput", "scoring"] if args.part == "all" else [args.part]
    for part in parts:
        if part == "mq2008":
            if not MQ2008.is_dir():
                print(f"skipping mq2008: {MQ2008} not found")
                continue
            _store(part, part_mq2008([int(f) for f in args.folds.split(",")]))
        elif part == "simulated":
            # One entry per seed, stored as it completes: seeds may run in separate processes.
            for seed in [int(s) for s in args.seeds.split(",")]:
                _store(part, part_simulated_seed(seed, args.sim_rows), key=str(seed))
        elif part == "throughput":
            _store(part, part_throughput(args.sim_rows))
        elif part == "scoring":
            _store(part, part_scoring())
        else:
            raise SystemExit(f"unknown part {part!r}")
    print(RESULTS_MD.read_text())


if __name__ == "__main__":
    main()
