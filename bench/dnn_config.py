"""Settings of bench.bench_dnn (shared with its report)."""

from __future__ import annotations

from typing import Any

# Quality runs use one thread: results do not depend on it, and on this shared 2-core machine
# two torch threads stall each other's spin-waits whenever other jobs run. Throughput is
# measured with both 1 and 2 threads.
QUALITY_THREADS = 1
THROUGHPUT_THREADS = (1, 2)
LOSSES = ("lambdarank", "ranknet", "listnet", "pointwise")

# Tuned on MQ2008 (5-fold mean, early stopping on vali): a small MLP, dropout, Adam at 5e-4.
MQ_OPTIONS: dict[str, Any] = {
    "hidden": [64, 32],
    "dropout": 0.2,
    "learning_rate": 5e-4,
    "batch_queries": 32,
    "epochs": 100,
    "early_stopping_rounds": 10,
    "threads": QUALITY_THREADS,
}
SIM_OPTIONS: dict[str, Any] = {
    "hidden": [128, 64],
    "dropout": 0.1,
    "learning_rate": 2e-3,
    "batch_queries": 64,
    "epochs": 12,
    "early_stopping_rounds": 3,
    "threads": QUALITY_THREADS,
    "embedding_dim": 8,
    "min_cluster_count": 20,
    # This bench measures the cluster row alone (its figures predate field rows);
    # bench.bench_user_features compares it with cluster + field rows.
    "field_embeddings": False,
}
LAMBDAMART_MQ = {"num_trees": 1000, "num_leaves": 31, "learning_rate": 0.05, "stop": 50}
LAMBDAMART_SIM = {"num_trees": 500, "num_leaves": 31, "learning_rate": 0.1, "stop": 30}
