"""Hyper-parameters of the native LambdaMART learner (names follow LightGBM where they exist)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

# LightGBM's eval_at is a C int and the numba kernels type k from the value: beyond int32 one
# fails to parse it, the other to compile (a typing traceback) once k outgrows int64. No list is
# that long, so a larger k adds nothing over the whole list.
MAX_EVAL_AT = 2**31 - 1
# LightGBM refuses num_leaves above 131072 (kMaxNumLeaves: "Check failed: (num_leaves) <=
# (131072)"); the native learner keeps a histogram per leaf (leaves x features x bins x 3
# doubles), and 10^8 leaves asked numpy for terabytes (a traceback). One bound for every engine.
MAX_NUM_LEAVES = 131_072
# Boosting rounds: 10^12 was accepted and would run for ever (the native learner keeps every
# tree, the scoring service walks every one for every document). A million is far beyond any
# useful ensemble (LambdaMART models run to a few thousand trees) and still leaves room for
# the usual "many rounds, let --early-stopping decide".
MAX_NUM_TREES = 1_000_000
# Threads: LightGBM 4.7 (OpenMP) crashed with a segmentation fault asked for 100,000 (16,384
# ran, slowly, on 2 cores). No machine this trains on has 4,096 hardware threads; more
# threads than cores only slows training.
MAX_THREADS = 4096
MAX_SEED = 2**31 - 1
MAX_LEARNING_RATE = 1000.0


class LambdaMARTParams(BaseModel):
    # No float parameter has a use for inf or NaN: inf passes the gt/ge bounds below and
    # would only fail once the trained model is exported.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    num_trees: int = Field(100, ge=1, le=MAX_NUM_TREES)
    num_leaves: int = Field(31, ge=2, le=MAX_NUM_LEAVES)
    # Shrinkage past 1 over-steps already; 1e308 overflowed the leaf values to infinity and the
    # error blamed the model file written, not the flag.
    learning_rate: float = Field(0.1, gt=0, le=MAX_LEARNING_RATE)
    min_data_in_leaf: int = Field(20, ge=1)
    min_sum_hessian_in_leaf: float = Field(1e-3, ge=0)
    lambda_l2: float = Field(0.0, ge=0)
    # Bin indices are uint16 with the NaN bin above the real ones: 65535 real bins fill them.
    max_bin: int = Field(255, ge=2, le=65535)
    sigma: float = Field(1.0, gt=0)
    # Truncation of delta NDCG (NDCG_num in Meituan-Dianping's LambdaDNN write-up, 2019): only
    # pairs with at least one document in the current top `ndcg_truncation` positions count.
    # None = the whole list.
    ndcg_truncation: int | None = Field(None, ge=1)
    # max_sort_size-style limit: only documents ranked in the top `max_pairs_rank` positions
    # form pairs. None = all pairs.
    max_pairs_rank: int | None = Field(None, ge=1)
    bagging_fraction: float = Field(1.0, gt=0, le=1)  # fraction of queries per tree
    feature_fraction: float = Field(1.0, gt=0, le=1)  # fraction of features per tree
    early_stopping_rounds: int | None = Field(None, ge=1)
    eval_at: int = Field(10, ge=1, le=MAX_EVAL_AT)  # NDCG@k for early stopping and progress
    # NDCG (and the report's MAP and MRR) of a query with no relevant document; ERR is 0 there.
    empty_query_ndcg: float = Field(1.0, ge=0, le=1)
    # numpy refuses a negative seed (a traceback), orjson one past 64 bits, LightGBM takes int32.
    seed: int = Field(0, ge=0, le=MAX_SEED)
    threads: int = Field(0, ge=0, le=MAX_THREADS)  # 0 = all cores
