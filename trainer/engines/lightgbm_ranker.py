"""LightGBM lambdarank as a training engine, for data too big for the native learner.

Takes the native learner's `LambdaMARTParams` (mapped to LightGBM's names), trains
deterministically, and returns the model converted to the tree dump, checked against
`Booster.predict`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.artifacts.tree_dump import TreeEnsemble
from app.errors import LtrError
from app.scoring.reference import predict
from trainer.convert.lightgbm_model import convert_lightgbm
from trainer.data.dataset import RankingDataset
from trainer.data.errors import (
    MAX_LABEL,
    DataFormatError,
    first_bad_label,
    first_fractional_label,
)
from trainer.export import scores_match
from trainer.lambdamart.params import LambdaMARTParams

CONVERSION_RTOL = 1e-6
# LightGBM's lambdarank and ndcg metric refuse a query of more rows than this (kMaxPosition:
# "Number of rows 100000 exceeds upper limit of 10000 for a query").
LIGHTGBM_MAX_QUERY = 10_000
# The gain of every grade the readers accept (0..MAX_LABEL), 2^label - 1 as LightGBM's default
# label_gain and the native engine's: LightGBM's default stops at 30 and refused label 31
# ("Label 31 is not less than the number of label mappings (31)").
LABEL_GAIN = [float(2**grade - 1) for grade in range(MAX_LABEL + 1)]


class EngineError(LtrError, RuntimeError):
    """Training failed or produced a model that does not convert faithfully."""


class LightGBMDataError(EngineError, DataFormatError):
    """Data LightGBM would refuse, said where it is: an EngineError to callers of the engine
    (LightGBM's own refusal was one), a DataFormatError by its message (file and line)."""


@dataclass(frozen=True)
class EngineIteration:
    """One boosting round, with the field names of the native learner's IterationLog."""

    iteration: int  # 1-based count of trees so far
    train_ndcg: float | None
    valid_ndcg: float | None
    elapsed: float


@dataclass(frozen=True)
class LightGBMResult:
    ensemble: TreeEnsemble
    model_text: str  # LightGBM's own model.txt of the kept iterations
    best_iteration: int
    history: list[EngineIteration] = field(default_factory=list)
    total_seconds: float = 0.0


def lightgbm_params(params: LambdaMARTParams, max_query_size: int) -> dict[str, Any]:
    """LightGBM's parameters for `params`; `max_query_size` stands in for "no truncation"."""
    truncation = [t for t in (params.ndcg_truncation, params.max_pairs_rank) if t is not None]
    out: dict[str, Any] = {
        "objective": "lambdarank",
        "metric": "ndcg",
        "eval_at": [params.eval_at],
        "num_leaves": params.num_leaves,
        "learning_rate": params.learning_rate,
        "min_data_in_leaf": params.min_data_in_leaf,
        "min_sum_hessian_in_leaf": params.min_sum_hessian_in_leaf,
        "lambda_l2": params.lambda_l2,
        "max_bin": params.max_bin,
        "sigmoid": params.sigma,
        "label_gain": LABEL_GAIN,
        "lambdarank_truncation_level": min(truncation) if truncation else max(max_query_size, 1),
        "feature_fraction": params.feature_fraction,
        "seed": params.seed,
        "num_threads": params.threads,
        "deterministic": True,
        "force_row_wise": True,
        "feature_pre_filter": False,
        "verbose": -1,
    }
    if params.bagging_fraction < 1.0:
        # Bag whole queries, as the native learner does.
        out |= {"bagging_fraction": params.bagging_fraction, "bagging_freq": 1}
        out["bagging_by_query"] = True
    return out


def check_lightgbm_data(data: RankingDataset) -> None:
    """Refuse, naming the file and line (or row, or query id), what LightGBM's lambdarank would
    refuse with a message naming neither (and a `[LightGBM] [Fatal]` line of its own on
    stderr): a label that is not a whole grade 0..MAX_LABEL, a query of more than
    LIGHTGBM_MAX_QUERY documents. Raises LightGBMDataError."""
    labels = data.labels
    bad = first_bad_label(labels)
    if bad is not None:
        raise _refused(data, bad[0], f"label {bad[1]}")
    fractional = first_fractional_label(labels, "lightgbm")
    if fractional is not None:
        raise _refused(data, *fractional)
    sizes = data.group_sizes
    large = np.flatnonzero(sizes > LIGHTGBM_MAX_QUERY)
    if large.size:
        query = int(large[0])
        raise _refused(
            data,
            int(data.group_offsets[query]),
            f"qid {data.query_ids[query]} has {int(sizes[query]):,} documents: LightGBM's "
            f"lambdarank limits a query to {LIGHTGBM_MAX_QUERY:,} rows; train with "
            "--engine native (no such limit), or cut the list",
            column="qid",
        )


def _refused(data: RankingDataset, row: int, what: str, column: str = "label") -> LightGBMDataError:
    return LightGBMDataError(f"{data.place(row, column)}: {what}")


def _dataset(lgb: Any, data: RankingDataset, ref: Any = None) -> Any:
    return lgb.Dataset(
        data.features,
        label=data.labels,
        group=data.group_sizes,
        reference=ref,
        free_raw_data=False,
    )


def train_lightgbm(
    train: RankingDataset,
    params: LambdaMARTParams,
    valid: RankingDataset | None = None,
    on_iteration: Callable[[EngineIteration], None] | None = None,
) -> LightGBMResult:
    """Train, keep the best iteration (early stopping on valid NDCG@eval_at), convert, verify."""
    import lightgbm as lgb

    start = time.perf_counter()
    history: list[EngineIteration] = []
    metric = f"ndcg@{params.eval_at}"

    def record(env: Any) -> None:
        found = {name: value for name, m, value, _ in env.evaluation_result_list if m == metric}
        log = EngineIteration(
            iteration=env.iteration + 1,
            train_ndcg=found.get("train"),
            valid_ndcg=found.get("valid"),
            elapsed=time.perf_counter() - start,
        )
        history.append(log)
        if on_iteration is not None:
            on_iteration(log)

    for data in (train, valid):
        if data is not None:
            check_lightgbm_data(data)
    max_query = int(train.group_sizes.max())
    lgb_params = lightgbm_params(params, max_query)
    train_set = _dataset(lgb, train)
    sets, names = [train_set], ["train"]
    callbacks: list[Callable[..., None]] = [record]
    if valid is not None:
        sets.append(_dataset(lgb, valid, ref=train_set))
        names.append("valid")
        if params.early_stopping_rounds:
            stop = lgb.early_stopping(params.early_stopping_rounds, verbose=False)
            callbacks.append(stop)
    try:
        booster = lgb.train(
            lgb_params,
            train_set,
            num_boost_round=params.num_trees,
            valid_sets=sets,
            valid_names=names,
            callbacks=callbacks,
        )
    except lgb.basic.LightGBMError as exc:
        raise EngineError(f"LightGBM: {exc}") from None
    best = booster.best_iteration or booster.current_iteration()
    text = booster.model_to_string(num_iteration=best)
    ensemble = convert_lightgbm(text, train.names(), source="LightGBM model")
    check = valid if valid is not None else train
    expected = np.asarray(booster.predict(check.features, num_iteration=best), dtype=np.float64)
    if not scores_match(predict(ensemble, check.features), expected, CONVERSION_RTOL):
        raise EngineError("the converted LightGBM model does not score like Booster.predict")
    return LightGBMResult(
        ensemble=ensemble,
        model_text=text,
        best_iteration=int(best),
        history=history,
        total_seconds=time.perf_counter() - start,
    )
