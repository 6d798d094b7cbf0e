"""Validation NDCG@k and early stopping for LightGBM on Dask, agreed by every worker.

LightGBM's Dask interface evaluates each worker's validation parts alone, and a worker whose
local metric stops improving leaves the boosting loop while its peers wait for it (LightGBM
issues #6351, #7009). This callback runs on every worker after each boosting round: it posts
the worker's sum of per-query NDCG@k and its query count to the scheduler (Dask's metadata
store), waits for every worker's post of the same round, and computes the global mean, which
is NDCG@k over all validation queries exactly as the local engine reports it. All workers see
the same numbers, so they stop at the same round.
"""

from __future__ import annotations

import time
from typing import Any

from trainer.engines.lightgbm_ranker import EngineError

SYNC_TIMEOUT_SECONDS = 600.0  # one round waits this long for the slowest worker


class ClusterSyncError(EngineError):
    """A worker did not report a boosting round in time (it died or hangs)."""


class GlobalEarlyStopping:
    """LightGBM callback; one copy runs on each worker (it is pickled to them).

    run_key: unique per training run (the scheduler's metadata key). rounds: stop after this
    many rounds without a better global value (0: never stop, only record).
    """

    order = 30  # after LightGBM's own recording callbacks

    def __init__(self, run_key: str, metric: str, rounds: int) -> None:
        self.run_key = run_key
        self.metric = metric
        self.rounds = rounds
        self.best_value = float("-inf")
        self.best_round = -1

    def __call__(self, env: Any) -> None:
        from distributed import get_client, get_worker
        from lightgbm.callback import EarlyStopException

        total, count = self._local_sum(env)
        client = get_client()
        key = [self.run_key, str(env.iteration)]
        client.set_metadata([*key, get_worker().address], [total, count])
        posts = _wait_for_all(client, key, int(env.params.get("num_machines", 1)))
        queries = sum(c for _, c in posts)
        value = sum(t for t, _ in posts) / queries if queries else float("nan")
        if value > self.best_value:
            self.best_value, self.best_round = value, env.iteration
        elif self.rounds and env.iteration - self.best_round >= self.rounds:
            best = [("valid", self.metric, self.best_value, True)]
            raise EarlyStopException(self.best_round, best)

    def _local_sum(self, env: Any) -> tuple[float, int]:
        """(sum over this worker's validation queries of the metric, their number)."""
        for name, metric, value, _ in env.evaluation_result_list or []:
            if name == "valid" and metric == self.metric:
                index = env.model.name_valid_sets.index("valid")
                queries = len(env.model.valid_sets[index].get_group())
                return float(value) * queries, queries
        return 0.0, 0  # this worker was given no validation part


def _wait_for_all(client: Any, key: list[str], workers: int) -> list[tuple[float, int]]:
    deadline = time.monotonic() + SYNC_TIMEOUT_SECONDS
    pause = 0.001
    while True:
        posted = client.get_metadata(key, default={})
        if len(posted) >= workers:
            return [(float(t), int(c)) for t, c in posted.values()]
        if time.monotonic() > deadline:
            raise ClusterSyncError(
                f"round {key[-1]}: {len(posted)} of {workers} workers reported within "
                f"{SYNC_TIMEOUT_SECONDS:.0f} s"
            )
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def global_history(client: Any, run_key: str) -> list[float]:
    """The global metric of every round that all workers reported, in order."""
    rounds = client.get_metadata([run_key], default={})
    history = []
    for iteration in sorted(rounds, key=int):
        posts = list(rounds[iteration].values())
        queries = sum(c for _, c in posts)
        history.append(sum(t for t, _ in posts) / queries if queries else float("nan"))
    return history


def forget_run(client: Any, run_key: str) -> None:
    """Drop the run's posts from the scheduler."""
    client.set_metadata([run_key], {})
