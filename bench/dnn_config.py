"""Settings of bench.bench_dnn (shared with its report)."""

from __future__ import annotations

from typing import Any

THREADS = 2
LOSSES = ("lambdarank", "ranknet", "listnet", "pointwise")

# Tuned on MQ2008 validation folds (see dnn.md): a small MLP, dropout, Adam at 5e-4.
MQ_OPTIONS: dict[str, Any] = {
    "hidden": [64, 32],
    "dropout": 0.2,
    "learning_rate": 5e-4,
    "batch_queries": 32,
    "epochs": 100,
    "early_stopping_rounds": 10,
    "threads": THREADS,
}
SIM_OPTIONS: dict[str, Any] = {
    "hidden": [128, 64],
    "dropout": 0.1,
    "learning_rate": 1e-3,
    "batch_queries": 32,
    "epochs": 40,
    "early_stopping_rounds": 5,
    "threads": THREADS,
    "embedding_dim": 8,
    "min_cluster_count": 20,
}
LAMBDAMART_MQ = {"num_trees": 1000, "num_leaves": 31, "learning_rate": 0.05, "stop": 50}
LAMBDAMART_SIM = {"num_trees": 500, "num_leaves": 31, "learning_rate": 0.1, "stop": 30}
