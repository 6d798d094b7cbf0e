"""The LambdaMART training loop: lambdas, a tree fitted to them, Newton leaf values, repeat."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numba
import numpy as np

from app.artifacts.tree_dump import Tree, TreeEnsemble
from trainer.data.dataset import RankingDataset
from trainer.lambdamart.binned_predict import add_leaf_values, add_tree
from trainer.lambdamart.binning import BinMapper, fit_bins
from trainer.lambdamart.lambdas import LambdaObjective
from trainer.lambdamart.params import LambdaMARTParams
from trainer.lambdamart.tree_learner import TreeLearner
from trainer.metrics.ndcg import mean_dcg, mean_ndcg

ValidMetric = Literal["ndcg", "dcg"]


@dataclass
class IterationLog:
    iteration: int  # trees so far (1-based)
    train_ndcg: float  # NDCG@eval_at on the training set after this iteration
    valid_ndcg: float | None
    elapsed: float  # seconds since training started
    lambda_seconds: float  # seconds spent computing this iteration's lambdas


@dataclass
class TrainResult:
    ensemble: TreeEnsemble  # truncated to best_iteration trees
    best_iteration: int  # number of trees kept
    history: list[IterationLog]
    lambda_seconds: float
    total_seconds: float
    # Scores of the training rows under `ensemble`, as the trainer computed them: float64 [n_docs].
    train_scores: np.ndarray | None = None


class Sampler:
    """Per-tree rows (whole queries, bagging_fraction) and features (feature_fraction)."""

    def __init__(self, data: RankingDataset, params: LambdaMARTParams) -> None:
        self.rng = np.random.default_rng(params.seed)
        self.offsets = data.group_offsets
        self.n_queries = data.num_queries
        self.n_features = data.num_features
        self.q_take = max(1, round(params.bagging_fraction * self.n_queries))
        self.f_take = max(1, round(params.feature_fraction * self.n_features))
        self.all_rows = np.arange(data.num_docs, dtype=np.int32)
        self.all_features = np.arange(self.n_features, dtype=np.int64)

    def rows(self) -> tuple[np.ndarray, np.ndarray | None]:
        """(rows in the bag, rows out of it or None), int32 ascending."""
        if self.q_take >= self.n_queries:
            return self.all_rows, None
        chosen = np.zeros(self.n_queries, dtype=bool)
        chosen[self.rng.choice(self.n_queries, self.q_take, replace=False)] = True
        in_bag = np.repeat(chosen, np.diff(self.offsets))
        return self.all_rows[in_bag], self.all_rows[~in_bag]

    def features(self) -> np.ndarray:
        if self.f_take >= self.n_features:
            return self.all_features
        return np.sort(self.rng.choice(self.n_features, self.f_take, replace=False))


def lambda_objective(data: RankingDataset, params: LambdaMARTParams) -> LambdaObjective:
    """The LambdaRank gradients of `data`'s labels under `params`."""
    return LambdaObjective(
        data.labels,
        data.group_offsets,
        sigma=params.sigma,
        ndcg_truncation=params.ndcg_truncation,
        max_pairs_rank=params.max_pairs_rank,
        eval_at=params.eval_at,
        empty_value=params.empty_query_ndcg,
    )


def tree_learner(bins: np.ndarray, mapper: BinMapper, params: LambdaMARTParams) -> TreeLearner:
    return TreeLearner(
        bins,
        mapper,
        params.num_leaves,
        params.min_data_in_leaf,
        params.min_sum_hessian_in_leaf,
        params.lambda_l2,
    )


def _set_threads(threads: int) -> None:
    limit = int(numba.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]
    numba.set_num_threads(limit if threads == 0 else min(threads, limit))


def train(
    train: RankingDataset,
    params: LambdaMARTParams,
    valid: RankingDataset | None = None,
    on_iteration: Callable[[IterationLog], None] | None = None,
    objective: LambdaObjective | None = None,
    valid_metric: ValidMetric = "ndcg",
) -> TrainResult:
    """Train a LambdaMART ensemble; early stopping on valid NDCG@eval_at (`valid_metric`
    "dcg": mean DCG@eval_at, for IPW-labelled clicks) when both `valid` and
    `params.early_stopping_rounds` are given. `objective` replaces the lambdas built from
    `train.labels` and `params` (e.g. lambdamart.unbiased.UnbiasedObjective for click logs)."""
    if valid is not None and valid.num_features != train.num_features:
        raise ValueError(f"valid has {valid.num_features} features, train {train.num_features}")
    t0 = time.perf_counter()
    _set_threads(params.threads)
    mapper = fit_bins(train.features, params.max_bin, params.seed)
    bins = mapper.transform(train.features)
    valid_bins = None if valid is None else mapper.transform(valid.features)
    objective = objective or lambda_objective(train, params)
    learner = tree_learner(bins, mapper, params)
    sampler = Sampler(train, params)
    scores = np.zeros(train.num_docs)
    valid_scores = None if valid is None else np.zeros(valid.num_docs)
    trees: list[Tree] = []
    history: list[IterationLog] = []
    best_scores = scores.copy()  # training scores at the best iteration (early stopping)
    best_ndcg = -np.inf
    best_iteration = 0
    lambda_total = 0.0
    # The train NDCG of iteration t comes out of the lambda pass of iteration t + 1 (it ranks the
    # same scores), so each iteration's log is completed and reported one pass later.
    waiting: IterationLog | None = None

    def report(train_ndcg: np.ndarray) -> None:
        nonlocal waiting
        if waiting is not None:
            waiting.train_ndcg = float(train_ndcg.mean())
            history.append(waiting)
            if on_iteration is not None:
                on_iteration(waiting)
            waiting = None

    stop_rounds = params.early_stopping_rounds if valid is not None else None
    for iteration in range(1, params.num_trees + 1):
        t_lambda = time.perf_counter()
        lam, hess, train_ndcg = objective.compute(scores)
        lambda_seconds = time.perf_counter() - t_lambda
        lambda_total += lambda_seconds
        report(train_ndcg)
        in_bag, out_of_bag = sampler.rows()
        grown = learner.grow(lam, hess, in_bag, sampler.features())
        if grown.num_leaves == 1 and out_of_bag is None and sampler.f_take == train.num_features:
            break  # nothing left to split on: every later tree would be the same stump
        values = grown.leaf_values(params.learning_rate, params.lambda_l2)
        add_leaf_values(learner.order, grown.leaf_start, grown.leaf_count, values, scores)
        if out_of_bag is not None:
            add_tree(bins, mapper.n_real, grown.nodes, values, out_of_bag, scores)
        trees.append(grown.to_tree(mapper, values))
        valid_ndcg = None
        if valid is not None and valid_scores is not None and valid_bins is not None:
            every = np.arange(valid.num_docs, dtype=np.int32)
            add_tree(valid_bins, mapper.n_real, grown.nodes, values, every, valid_scores)
            valid_ndcg = (
                mean_dcg(valid_scores, valid.labels, valid.group_offsets, params.eval_at)
                if valid_metric == "dcg"
                else mean_ndcg(
                    valid_scores,
                    valid.labels,
                    valid.group_offsets,
                    params.eval_at,
                    params.empty_query_ndcg,
                )
            )
        waiting = IterationLog(
            iteration, np.nan, valid_ndcg, time.perf_counter() - t0, lambda_seconds
        )
        if stop_rounds is None or valid_ndcg is None:
            best_iteration = iteration
        elif valid_ndcg > best_ndcg:
            best_iteration = iteration
            best_ndcg = valid_ndcg
            best_scores[:] = scores
        elif iteration - best_iteration >= stop_rounds:
            break
    if waiting is not None:
        report(objective.compute(scores, with_lambdas=False)[2])
    final_scores = scores if stop_rounds is None else best_scores
    ensemble = TreeEnsemble(
        num_features=train.num_features,
        trees=trees[:best_iteration],
        base_score=0.0,
        meta={"engine": "native", "params": params.model_dump()},
    )
    return TrainResult(
        ensemble=ensemble,
        best_iteration=best_iteration,
        history=history,
        lambda_seconds=lambda_total,
        total_seconds=time.perf_counter() - t0,
        train_scores=final_scores,
    )
