"""Validation NDCG@k and early stopping for LightGBM on Dask, agreed by every worker.

LightGBM's Dask interface evaluates each worker's validation parts alone, and a worker whose
local metric stops improving leaves the boosting loop while its peers wait for it (LightGBM
issues #6351, #7009); its `eval_set` also routes data through the client (`dask_validation`).
This callback runs on every training worker after each boosting round: the worker scores its
share of the validation partitions (`dask_validation.WorkerValidation`), posts its sum of
per-query NDCG@k and its query count to the scheduler (Dask's metadata store), waits for every
worker's post of the same round, and computes the global mean, which is NDCG@k over all
validation queries exactly as the local engines report it. All workers see the same numbers,
so they stop at the same round; as LightGBM's `early_stopping` callback, the best round is
kept, also when the last round is reached without stopping.
"""

from __future__ import annotations

import time
from typing import Any

from trainer.engines.dask_validation import ValidationPlan, WorkerValidation, assign_partitions
from trainer.engines.lightgbm_ranker import EngineError

SYNC_TIMEOUT_SECONDS = 600.0  # one round waits this long for the slowest worker


class ClusterSyncError(EngineError):
    """A worker did not report a boosting round in time (it died or hangs)."""


class GlobalEarlyStopping:
    """LightGBM callback; one copy runs on each worker (it is pickled to them).

    run_key: unique per training run (the scheduler's metadata key). rounds: stop after this
    many rounds without a better global value (0: never stop, keep every tree, only record).
    """

    order = 30  # after LightGBM's own recording callbacks

    def __init__(self, run_key: str, metric: str, plan: ValidationPlan, rounds: int) -> None:
        self.run_key = run_key
        self.metric = metric
        self.plan = plan
        self.rounds = rounds
        self.best_value = float("-inf")
        self.best_round = -1
        self._validation: WorkerValidation | None = None

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__ | {"_validation": None}  # the data never travels

    def __call__(self, env: Any) -> None:
        from distributed import get_client, get_worker
        from lightgbm.callback import EarlyStopException

        client = get_client()
        address = get_worker().address
        workers = int(env.params.get("num_machines", 1))
        if self._validation is None:
            client.set_metadata([self.run_key, "workers", address], True)
            joined = _wait_for_all(client, [self.run_key, "workers"], workers, "start")
            mine = assign_partitions(self.plan, sorted(joined))[address]
            self._validation = WorkerValidation.on_worker(self.plan, mine)
        threads = int(env.params.get("num_threads", 1))
        total, count = self._validation.after_round(env.model, env.iteration, threads)
        key = [self.run_key, "rounds", str(env.iteration)]
        client.set_metadata([*key, address], [total, count])
        posts = _wait_for_all(client, key, workers, f"round {env.iteration}")
        value = _mean([(float(t), int(c)) for t, c in posts.values()])
        if value > self.best_value:
            self.best_value, self.best_round = value, env.iteration
        if not self.rounds:
            return
        best = [("valid", self.metric, self.best_value, True)]
        if env.iteration - self.best_round >= self.rounds:
            raise EarlyStopException(self.best_round, best)
        if env.iteration == env.end_iteration - 1:
            raise EarlyStopException(self.best_round, best)  # keep the best, as LightGBM does


def _mean(posts: list[tuple[float, int]]) -> float:
    queries = sum(c for _, c in posts)
    return sum(t for t, _ in posts) / queries if queries else float("nan")


def _wait_for_all(client: Any, key: list[str], workers: int, what: str) -> dict[str, Any]:
    deadline = time.monotonic() + SYNC_TIMEOUT_SECONDS
    pause = 0.001
    while True:
        posted: dict[str, Any] = client.get_metadata(key, default={})
        if len(posted) >= workers:
            return posted
        if time.monotonic() > deadline:
            raise ClusterSyncError(
                f"{what}: {len(posted)} of {workers} workers reported within "
                f"{SYNC_TIMEOUT_SECONDS:.0f} s"
            )
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def global_history(client: Any, run_key: str) -> list[float]:
    """The global metric of every round that all workers reported, in order."""
    rounds = client.get_metadata([run_key, "rounds"], default={})
    return [
        _mean([(float(t), int(c)) for t, c in rounds[i].values()]) for i in sorted(rounds, key=int)
    ]


def forget_run(client: Any, run_key: str) -> None:
    """Drop the run's posts from the scheduler."""
    client.set_metadata([run_key], {})
