"""Training a ranker: Adam on whole query lists, early stopping on validation NDCG@k, and
deterministic for a given seed and thread count."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
import torch

from trainer.dnn.batching import EpochShuffler, QueryLists
from trainer.dnn.losses import LossFn
from trainer.dnn.models import Ranker
from trainer.dnn.options import DNNOptions

PREDICT_BATCH_QUERIES = 256
# NDCG on the training set is reported for at most this many queries: enough to show progress,
# cheap next to an epoch.
TRAIN_METRIC_QUERIES = 2000


@runtime_checkable
class ProgressSink(Protocol):
    """What the loop reports to (trainer.progress.TrainingProgress fits)."""

    def update(
        self, iteration: int, train_metric: float | None = None, valid_metric: float | None = None
    ) -> None: ...

    def message(self, text: str) -> None: ...


@dataclass
class TrainingResult:
    """The ranker holds the weights of the best validation epoch (the last one without
    validation)."""

    ranker: Ranker
    best_epoch: int  # 1-based
    best_valid_ndcg: float | None
    epochs_run: int
    seconds: float
    lists_trained: int
    history: list[dict[str, float]] = field(default_factory=list)

    @property
    def lists_per_second(self) -> float:
        return self.lists_trained / self.seconds if self.seconds > 0 else float("nan")


@contextmanager
def deterministic(seed: int, threads: int) -> Iterator[None]:
    """Seed torch, force deterministic kernels and fix the thread count; restored on exit."""
    previous_threads = torch.get_num_threads()
    previous_mode = torch.get_deterministic_debug_mode()
    torch.manual_seed(seed)
    # Same switch as torch.use_deterministic_algorithms(True) (error on a nondeterministic
    # kernel) without that function's import of torch._inductor, seconds per process.
    torch.set_deterministic_debug_mode("error")
    torch.set_num_threads(threads or os.cpu_count() or 1)
    try:
        yield
    finally:
        torch.set_num_threads(previous_threads)
        torch.set_deterministic_debug_mode(previous_mode)


def predict_lists(ranker: Ranker, lists: QueryLists) -> np.ndarray:
    """Scores float64 [n_docs] in the lists' stored document order, in eval mode."""
    was_training = ranker.training
    ranker.eval()
    parts = []
    with torch.no_grad():
        for batch in lists.batches(PREDICT_BATCH_QUERIES):
            scores = ranker(batch.features, batch.clusters)
            parts.append(scores[batch.mask].to(torch.float64).numpy())
    ranker.train(was_training)
    return np.concatenate(parts)


def list_ndcg(ranker: Ranker, lists: QueryLists, labels: np.ndarray, k: int) -> float:
    """Mean NDCG@k over the lists (a list with no relevant document counts 1)."""
    from trainer.metrics.ndcg import mean_ndcg

    scores = predict_lists(ranker, lists)
    return float(mean_ndcg(scores, labels, lists.offsets, k, empty_value=1.0))


def train_ranker(
    ranker: Ranker,
    loss_fn: LossFn,
    train: QueryLists,
    train_labels: np.ndarray,
    options: DNNOptions,
    valid: QueryLists | None = None,
    valid_labels: np.ndarray | None = None,
    progress: ProgressSink | None = None,
    before_validation: Callable[[Ranker], None] | None = None,
) -> TrainingResult:
    """Train in place for up to `options.epochs` epochs; returns the best epoch's weights.

    Call inside `deterministic(...)` (and build the ranker there) for a reproducible run.
    train_labels: [n_train_docs]; valid_labels: [n_valid_docs] when `valid` is given.
    `before_validation` runs before each validation pass and must make the ranker score as the
    exported model will (e.g. fill the user-table rows no training list reaches): the
    validation NDCG picks the best epoch and is the metric the version records.
    """
    optimiser = torch.optim.Adam(
        ranker.parameters(), lr=options.learning_rate, weight_decay=options.weight_decay
    )
    shuffler = EpochShuffler(train.num_queries, options.seed)
    probe_n = min(train.num_queries, TRAIN_METRIC_QUERIES)
    probe = train.subset(np.arange(probe_n))
    probe_labels = train_labels[: int(train.offsets[probe_n])]
    best_state = {k: v.detach().clone() for k, v in ranker.state_dict().items()}
    best_epoch, best_valid, since_best = 0, -np.inf, 0
    history: list[dict[str, float]] = []
    lists_trained, train_seconds, epoch = 0, 0.0, 0
    for epoch in range(1, options.epochs + 1):
        ranker.train()
        started = time.perf_counter()
        total_loss, n_batches = 0.0, 0
        for batch in train.batches(options.batch_queries, shuffler.next_order()):
            optimiser.zero_grad(set_to_none=True)
            scores = ranker(batch.features, batch.clusters)
            loss = loss_fn(scores, batch.labels, batch.mask)
            loss.backward()
            optimiser.step()
            total_loss += float(loss.detach())
            n_batches += 1
        train_seconds += time.perf_counter() - started
        lists_trained += train.num_queries
        train_ndcg = list_ndcg(ranker, probe, probe_labels, options.eval_at)
        record = {"epoch": float(epoch), "loss": total_loss / max(n_batches, 1)}
        record["train_ndcg"] = train_ndcg
        valid_ndcg: float | None = None
        if valid is not None and valid_labels is not None:
            if before_validation is not None:
                before_validation(ranker)
            valid_ndcg = list_ndcg(ranker, valid, valid_labels, options.eval_at)
            record["valid_ndcg"] = valid_ndcg
        history.append(record)
        if progress is not None:
            progress.update(epoch, train_metric=train_ndcg, valid_metric=valid_ndcg)
        if valid_ndcg is None or valid_ndcg > best_valid:
            best_valid, best_epoch, since_best = valid_ndcg or 0.0, epoch, 0
            best_state = {k: v.detach().clone() for k, v in ranker.state_dict().items()}
        else:
            since_best += 1
            rounds = options.early_stopping_rounds
            if rounds is not None and since_best >= rounds:
                if progress is not None:
                    progress.message(f"early stopping at epoch {epoch}, best epoch {best_epoch}")
                break
    ranker.load_state_dict(best_state)
    ranker.eval()
    return TrainingResult(
        ranker=ranker,
        best_epoch=best_epoch,
        best_valid_ndcg=None if valid is None else float(best_valid),
        epochs_run=epoch,
        seconds=train_seconds,
        lists_trained=lists_trained,
        history=history,
    )
