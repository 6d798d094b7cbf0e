"""Native LambdaMART against LightGBM lambdarank and XGBoost rank:ndcg: quality and speed.

Quality: MQ2008 five folds, train on train, early stopping on vali NDCG@10, test NDCG@10 (a query
with no relevant document scores 1). Speed: training time with 2 threads on MQ2008 Fold1 and on a
generated 200,000-row, 136-feature, 2,000-query set, 200 trees of 63 leaves, median of repeats.

    .venv/bin/python -m bench.bench_lambdamart [--part quality|speed|all] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from trainer.data.dataset import RankingDataset
from trainer.data.loader import load_dataset
from trainer.lambdamart import LambdaMARTParams, train
from trainer.metrics.ndcg import mean_ndcg

MQ2008 = Path(__file__).resolve().parents[1] / ".." / "shared" / "datasets" / "mq2008"
RESULTS = Path(__file__).resolve().parent / "results" / "lambdamart.md"
THREADS = 2


def _native(tr: RankingDataset, va: RankingDataset | None, cfg: dict) -> Callable:
    params = LambdaMARTParams(
        num_trees=cfg["trees"],
        num_leaves=cfg["leaves"],
        learning_rate=cfg["lr"],
        min_data_in_leaf=20,
        max_bin=255,
        early_stopping_rounds=cfg.get("early_stop"),
        eval_at=10,
        threads=THREADS,
        ndcg_truncation=cfg.get("truncation"),
    )
    result = train(tr, params, va)
    return lambda x: _predict_native(result.ensemble, x)


def _predict_native(ensemble, features: np.ndarray) -> np.ndarray:
    from app.scoring.reference import predict

    return predict(ensemble, features)


def _lightgbm(tr: RankingDataset, va: RankingDataset | None, cfg: dict) -> Callable:
    import lightgbm as lgb

    params = {
        "objective": "lambdarank",
        "num_leaves": cfg["leaves"],
        "learning_rate": cfg["lr"],
        "min_data_in_leaf": 20,
        "max_bin": 255,
        "eval_at": [10],
        "metric": "ndcg",
        "num_threads": THREADS,
        "verbose": -1,
        "deterministic": True,
        "seed": 0,
    }
    if cfg.get("truncation"):
        params["lambdarank_truncation_level"] = cfg["truncation"]
    dtrain = lgb.Dataset(tr.features, tr.labels, group=np.diff(tr.group_offsets))
    sets: list = []
    callbacks: list = []
    if va is not None:
        sets = [lgb.Dataset(va.features, va.labels, group=np.diff(va.group_offsets))]
        callbacks = [lgb.early_stopping(cfg["early_stop"], verbose=False)]
    else:
        params["metric"] = "none"
    booster = lgb.train(params, dtrain, cfg["trees"], valid_sets=sets, callbacks=callbacks)
    return lambda x: booster.predict(x, num_iteration=booster.best_iteration or None)


def _xgboost(tr: RankingDataset, va: RankingDataset | None, cfg: dict) -> Callable:
    import xgboost as xgb

    dtrain = xgb.DMatrix(tr.features, tr.labels, group=np.diff(tr.group_offsets))
    params = {
        "objective": "rank:ndcg",
        "eval_metric": "ndcg@10",
        "tree_method": "hist",
        "grow_policy": "lossguide",
        "max_leaves": cfg["leaves"],
        "max_depth": 0,
        "eta": cfg["lr"],
        "max_bin": 255,
        "nthread": THREADS,
        "seed": 0,
    }
    evals = []
    if va is not None:
        evals = [(xgb.DMatrix(va.features, va.labels, group=np.diff(va.group_offsets)), "vali")]
    booster = xgb.train(
        params,
        dtrain,
        cfg["trees"],
        evals=evals,
        early_stopping_rounds=cfg.get("early_stop") if evals else None,
        verbose_eval=False,
    )
    best = getattr(booster, "best_iteration", None)
    rng = (0, best + 1) if evals and best is not None else (0, 0)
    return lambda x: booster.predict(xgb.DMatrix(x), iteration_range=rng)


ENGINES = {"native": _native, "lightgbm": _lightgbm, "xgboost": _xgboost}


def quality(folds: list[int], lines: list[str]) -> None:
    cfg = {"trees": 1000, "leaves": 31, "lr": 0.05, "early_stop": 50}
    table: dict[str, list[float]] = {name: [] for name in ENGINES}
    for fold in folds:
        d = MQ2008 / f"Fold{fold}"
        tr = load_dataset(d / "train.txt", num_features=46)
        va = load_dataset(d / "vali.txt", num_features=46)
        te = load_dataset(d / "test.txt", num_features=46)
        for name, fit in ENGINES.items():
            score = fit(tr, va, cfg)(te.features)
            table[name].append(mean_ndcg(score, te.labels, te.group_offsets, 10, 1.0))
            print(f"fold {fold} {name}: {table[name][-1]:.4f}", flush=True)
    lines += [
        "## Quality: MQ2008 test NDCG@10 (empty query = 1)",
        "",
        "31 leaves, learning rate 0.05, up to 1000 trees, early stopping 50 on vali NDCG@10,",
        "min_data_in_leaf 20, max_bin 255; each engine's other settings at their defaults.",
        "",
        "| fold | " + " | ".join(ENGINES) + " | native - lightgbm |",
        "|---|" + "---:|" * (len(ENGINES) + 1),
    ]
    for i, fold in enumerate(folds):
        cells = " | ".join(f"{table[n][i]:.4f}" for n in ENGINES)
        diff = table["native"][i] - table["lightgbm"][i]
        lines.append(f"| {fold} | {cells} | {diff:+.4f} |")
    means = {n: float(np.mean(v)) for n, v in table.items()}
    cells = " | ".join(f"**{means[n]:.4f}**" for n in ENGINES)
    lines += [f"| mean | {cells} | {means['native'] - means['lightgbm']:+.4f} |", ""]


def _timed(fit: Callable, tr: RankingDataset, cfg: dict, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fit(tr, None, cfg)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _lambda_share(tr: RankingDataset, cfg: dict) -> float:
    params = LambdaMARTParams(
        num_trees=cfg["trees"],
        num_leaves=cfg["leaves"],
        learning_rate=cfg["lr"],
        threads=THREADS,
        ndcg_truncation=cfg.get("truncation"),
    )
    result = train(tr, params)
    return result.lambda_seconds / result.total_seconds


def speed(repeats: int, lines: list[str], sets: list[str]) -> None:
    from bench.generate_letor import generate

    data: dict[str, RankingDataset] = {}
    if "mq2008" in sets:
        data["MQ2008 Fold1 (9,630 rows, 46 features)"] = load_dataset(
            MQ2008 / "Fold1" / "train.txt", num_features=46
        )
    if "synthetic" in sets:
        data["synthetic (200,000 rows, 136 features, 2,000 queries)"] = generate(
            200_000, 136, 2_000, 0
        )
    lines += [
        "## Speed: training time, native / LightGBM",
        "",
        f"200 trees of 63 leaves, learning rate 0.1, {THREADS} threads both, no validation set;",
        "binning included on both sides (native: fit_bins + transform; LightGBM: Dataset",
        f"construction). Median of {repeats} runs, engines interleaved in one process.",
        "",
        "| data | pairs | native s | LightGBM s | ratio | lambda share (native) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for label, tr in data.items():
        for truncation in (30,):
            cfg = {"trees": 200, "leaves": 63, "lr": 0.1, "truncation": truncation}
            _native(tr, None, {**cfg, "trees": 2})  # compile outside the timing
            t_native = _timed(_native, tr, cfg, repeats)
            t_lgb = _timed(_lightgbm, tr, cfg, repeats)
            share = _lambda_share(tr, cfg)
            pairs = "all" if truncation is None else f"top {truncation}"
            row = f"| {label} | {pairs} | {t_native:.2f} | {t_lgb:.2f} | "
            row += f"{t_native / t_lgb:.2f} | {share:.0%} |"
            print(row, flush=True)
            lines.append(row)
    lines.append("")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", choices=["quality", "speed", "all"], default="all")
    ap.add_argument("--folds", default="1,2,3,4,5")
    ap.add_argument("--sets", default="mq2008,synthetic")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--write", action="store_true", help=f"write {RESULTS}")
    args = ap.parse_args()
    lines: list[str] = [
        "# Native LambdaMART vs LightGBM and XGBoost (`bench/bench_lambdamart.py`)",
        "",
    ]
    if args.part in ("quality", "all"):
        quality([int(f) for f in args.folds.split(",")], lines)
    if args.part in ("speed", "all"):
        speed(args.repeats, lines, args.sets.split(","))
    print("\n".join(lines))
    if args.write:
        RESULTS.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
