"""Validation NDCG@k of LightGBM on Dask, computed by the workers on the data they hold.

We do not give LightGBM's Dask interface an `eval_set`: to see which workers were given
validation parts, `lightgbm.dask._train` (4.7) calls `.result()` on the training parts, pulling
training and validation partitions into the client. Instead the client hands the training
callback a `ValidationPlan` (keys of the persisted validation partitions and which workers held
them); once training starts, the training workers split the partitions between them (held ones
where they are; a partition held by no training worker is fetched worker to worker), and after
every boosting round each worker adds the round's tree to its running scores and computes the
NDCG@k of its own queries with `trainer.metrics.ndcg`, as the local engines report it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from trainer.metrics.ndcg import ndcg_of
from trainer.metrics.ordering import RankedLists, ideal_ranking, rank_by_score

if TYPE_CHECKING:
    from distributed import Client

    from trainer.data.dask_parquet import ClusterDataset

FETCH_TIMEOUT_SECONDS = 600.0
PartKeys = tuple[Any, Any, Any]  # Dask keys of one partition's features, labels, query sizes


@dataclass(frozen=True)
class ValidationPlan:
    """Metadata of the validation set: what the training callback needs, never the data."""

    keys: list[PartKeys]  # per partition
    rows: list[int]  # documents per partition
    holders: list[list[str]]  # per partition: addresses of the workers that held its features
    eval_at: int
    empty_value: float  # NDCG of a query with no relevant document


def plan_validation(
    client: Client, valid: ClusterDataset, eval_at: int, empty_value: float
) -> ValidationPlan:
    from distributed import futures_of

    collections = (valid.features, valid.labels, valid.query_sizes)
    keys = list(zip(*(_stored_keys(c) for c in collections), strict=True))
    who_has = client.who_has(futures_of(valid.features))
    return ValidationPlan(
        keys=keys,
        rows=[end - start for _, start, end in valid.parts],
        holders=[sorted(who_has.get(x, [])) for x, _, _ in keys],
        eval_at=eval_at,
        empty_value=empty_value,
    )


def _stored_keys(collection: Any) -> list[Any]:
    """The keys under which the workers hold a persisted collection's partitions, in order.

    A persisted dask-expr collection names its partitions by aliases of the keys computed
    (e.g. a column selection pushed into the read); a worker knows only the latter."""
    from dask._task_spec import Alias
    from distributed import futures_of

    graph = collection.__dask_graph__()
    held = {future.key for future in futures_of(collection)}
    out = []
    for key in collection.__dask_keys__():
        while key not in held and isinstance(graph.get(key), Alias):
            key = graph[key].target
        if key not in held:
            raise ValueError(f"partition {key!r} of the validation set is not persisted")
        out.append(key)
    return out


def assign_partitions(plan: ValidationPlan, workers: list[str]) -> dict[str, list[int]]:
    """Each validation partition to exactly one training worker: a worker that holds it if
    any (the least loaded in rows), else the least loaded. Deterministic, so every worker
    computes the same split from the same plan and worker list."""
    load = dict.fromkeys(sorted(workers), 0)
    out: dict[str, list[int]] = {w: [] for w in load}
    for i in sorted(range(len(plan.rows)), key=lambda i: (-plan.rows[i], i)):
        pool = [w for w in plan.holders[i] if w in load] or list(load)
        chosen = min(pool, key=lambda w: (load[w], w))
        load[chosen] += plan.rows[i]
        out[chosen].append(i)
    return out


@dataclass
class _Part:
    features: np.ndarray  # float32 [n, n_features]
    labels: np.ndarray  # float64 [n]
    offsets: np.ndarray  # int64 [n_queries + 1]
    ideal: RankedLists
    scores: np.ndarray  # float64 [n], raw scores of the trees so far


class WorkerValidation:
    """One worker's share of the validation set and its model scores, round by round."""

    def __init__(self, plan: ValidationPlan, blocks: list[tuple[Any, Any, Any]]) -> None:
        """blocks: (features, labels, query sizes) of each partition this worker scores."""
        self.plan = plan
        self.parts = [_part(*partition) for partition in blocks]
        self.rounds_scored = 0

    @classmethod
    def on_worker(cls, plan: ValidationPlan, mine: list[int]) -> WorkerValidation:
        """The partitions `mine` (indices into `plan`), run inside a task on a worker."""
        return cls(plan, _load([plan.keys[i] for i in mine]))

    def after_round(self, booster: Any, iteration: int, threads: int) -> tuple[float, int]:
        """(sum over this worker's queries of NDCG@k after `iteration` (0-based), their
        number), adding each tree not yet scored (LightGBM calls back after every round)."""
        total, count = 0.0, 0
        new_trees = iteration + 1 - self.rounds_scored
        for part in self.parts:
            if new_trees > 0:
                part.scores += booster.predict(
                    part.features,
                    start_iteration=self.rounds_scored,
                    num_iteration=new_trees,
                    raw_score=True,
                    num_threads=threads,
                )
            ranked = rank_by_score(part.scores, part.labels, part.offsets)
            ndcg = ndcg_of(ranked, part.ideal, self.plan.eval_at, self.plan.empty_value)
            total += float(ndcg.sum())
            count += int(ndcg.size)
        self.rounds_scored = max(self.rounds_scored, iteration + 1)
        return total, count


def _load(keys: list[PartKeys]) -> list[tuple[Any, Any, Any]]:
    """The partitions' blocks: from this worker's memory, or fetched from the worker that
    holds them (worker to worker; the client never sees them)."""
    from distributed import Future, get_client, get_worker, wait

    held = get_worker().data
    flat = [key for blocks in keys for key in blocks]
    missing = [key for key in flat if key not in held]
    fetched: dict[Any, Any] = {}
    if missing:
        client = get_client()
        futures: list[Any] = [Future(key, client) for key in missing]
        wait(futures, timeout=FETCH_TIMEOUT_SECONDS)  # TimeoutError rather than a hang
        fetched = dict(zip(missing, client.gather(futures), strict=True))
        for future in futures:
            future.release()
    found = [fetched[key] if key in fetched else held[key] for key in flat]
    return [(found[3 * i], found[3 * i + 1], found[3 * i + 2]) for i in range(len(keys))]


def _part(features: Any, labels: Any, sizes: Any) -> _Part:
    offsets = np.concatenate([[0], np.cumsum(np.asarray(sizes, dtype=np.int64))])
    label_array = np.asarray(labels, dtype=np.float64)
    matrix = np.ascontiguousarray(np.asarray(features, dtype=np.float32))
    return _Part(
        features=matrix,
        labels=label_array,
        offsets=offsets.astype(np.int64),
        ideal=ideal_ranking(label_array, offsets.astype(np.int64)),
        scores=np.zeros(label_array.size, dtype=np.float64),
    )
