"""What every training engine returns (`TrainingResult`), and what the tree learners behind
`trainer.engines.tree_model` have in common (`LearnedTrees`, `IterationRecord`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from app.artifacts.tree_dump import TreeEnsemble


@dataclass(frozen=True)
class TrainingResult:
    """A trained model written as the version directory `model_dir`.

    metrics: the ranking report (trainer.metrics.report) on the set named by `evaluated_on`
    for tree engines; the DNN's best validation NDCG@k (empty without validation data).
    The tree fields (trees, best_iteration, seconds, evaluated_on) are None for the DNN, whose
    manifest `training` record is given instead.
    """

    model_dir: Path
    name: str
    version: str
    kind: str  # the manifest kind: "lambdamart" or "lambdadnn"
    engine: str  # native | lightgbm | lightgbm-dask | dnn
    metrics: dict[str, float | int]
    trees: int | None = None
    # Splits over all trees: 0 means every document scores the same (LightGBM writes one
    # leaf-only tree where the native learner writes none).
    splits: int | None = None
    best_iteration: int | None = None
    seconds: float | None = None
    evaluated_on: str | None = None  # "valid" or "train"
    training: dict[str, Any] | None = None

    @classmethod
    def of_trees(
        cls,
        model_dir: Path,
        name: str,
        engine: str,
        learned: LearnedTrees,
        metrics: dict[str, float | int],
        evaluated_on: str,
    ) -> TrainingResult:
        """A tree ensemble written as `model_dir` (whose name is the version)."""
        return cls(
            model_dir=model_dir,
            name=name,
            version=model_dir.name,
            kind="lambdamart",
            engine=engine,
            metrics=metrics,
            trees=len(learned.ensemble.trees),
            splits=sum(tree.num_nodes for tree in learned.ensemble.trees),
            best_iteration=learned.best_iteration,
            seconds=round(learned.total_seconds, 3),
            evaluated_on=evaluated_on,
        )

    def as_json(self) -> dict[str, Any]:
        """The object `ltr train --json` prints: the fields that apply, in a fixed order."""
        out: dict[str, Any] = {
            "model_dir": str(self.model_dir),
            "name": self.name,
            "version": self.version,
            "kind": self.kind,
            "engine": self.engine,
        }
        optional = {
            "trees": self.trees,
            "best_iteration": self.best_iteration,
            "seconds": self.seconds,
            "evaluated_on": self.evaluated_on,
            "training": self.training,
        }
        out |= {key: value for key, value in optional.items() if value is not None}
        out["metrics"] = self.metrics
        return out


class LearnedTrees(Protocol):
    """A boosted ensemble as a learner returns it (lambdamart.booster.TrainResult,
    engines.lightgbm_ranker.LightGBMResult)."""

    @property
    def ensemble(self) -> TreeEnsemble: ...
    @property
    def best_iteration(self) -> int: ...
    @property
    def total_seconds(self) -> float: ...


class IterationRecord(Protocol):
    """One boosting round as the learners report it (IterationLog, EngineIteration)."""

    @property
    def iteration(self) -> int: ...
    @property
    def train_ndcg(self) -> float | None: ...
    @property
    def valid_ndcg(self) -> float | None: ...
