"""Compiling the native trainer's numba kernels in two processes at once.

With an empty numba cache (a user's first `make run`), training the demo model is mostly
compilation, one kernel after another on one core: the tree learner's (binning, histograms,
the split search) and the lambda gradients'. They share no kernels, so a second process can
compile the gradients while this one compiles the tree learner, and training then loads both
from numba's on-disk cache (`cache=True`). Both warm-ups run the real code on the first
queries of the real data, so every kernel is compiled for exactly the types training uses.

`python -m trainer.lambdamart.kernel_warmup DATA PARAMS_JSON` is the second process.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from trainer.data.dataset import RankingDataset
from trainer.lambdamart.params import LambdaMARTParams

WARMUP_QUERIES = 32


def head(data: RankingDataset, queries: int = WARMUP_QUERIES) -> RankingDataset:
    """The first `queries` queries of `data` (same dtypes and layout)."""
    return data.subset_queries(np.arange(min(queries, data.num_queries)))


def warm_tree_learner(data: RankingDataset, params: LambdaMARTParams) -> None:
    """Grow one tree on `data` as `booster.train` does, with made-up gradients: compiles the
    binning, histogram, split-search and tree-scoring kernels."""
    from trainer.lambdamart.binned_predict import add_leaf_values, add_tree
    from trainer.lambdamart.binning import fit_bins
    from trainer.lambdamart.booster import Sampler, tree_learner

    mapper = fit_bins(data.features, params.max_bin, params.seed)
    bins = mapper.transform(data.features)
    learner = tree_learner(bins, mapper, params)
    sampler = Sampler(data, params)
    rng = np.random.default_rng(0)
    gradients = rng.standard_normal(data.num_docs)
    hessians = np.abs(rng.standard_normal(data.num_docs)) + 0.1
    in_bag, _ = sampler.rows()
    grown = learner.grow(gradients, hessians, in_bag, sampler.features())
    values = grown.leaf_values(params.learning_rate, params.lambda_l2)
    scores = np.zeros(data.num_docs)
    add_leaf_values(learner.order, grown.leaf_start, grown.leaf_count, values, scores)
    every = np.arange(data.num_docs, dtype=np.int32)
    add_tree(bins, mapper.n_real, grown.nodes, values, every, scores)


def warm_objective(data: RankingDataset, params: LambdaMARTParams) -> None:
    """One lambda pass and the validation metric on `data`: compiles the gradient kernels."""
    from trainer.lambdamart.booster import lambda_objective
    from trainer.metrics.ndcg import mean_ndcg

    objective = lambda_objective(data, params)
    scores = np.zeros(data.num_docs)
    objective.compute(scores)
    objective.compute(scores, with_lambdas=False)
    mean_ndcg(scores, data.labels, data.group_offsets, params.eval_at, params.empty_query_ndcg)


def start_objective_warmup(data_file: Path, params: LambdaMARTParams) -> subprocess.Popen[bytes]:
    """The second process: compiles the gradient kernels for `data_file`'s types."""
    return subprocess.Popen(
        [sys.executable, "-m", __name__, str(data_file), params.model_dump_json()],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def main(argv: list[str]) -> None:
    from trainer.data.loader import load_dataset

    data_file, params_json = argv
    params = LambdaMARTParams.model_validate_json(params_json)
    warm_objective(head(load_dataset(Path(data_file))), params)


if __name__ == "__main__":
    main(sys.argv[1:])
