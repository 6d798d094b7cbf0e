"""`ltr experiment stop`: end the model's running experiment, or clear what services cannot
serve: an EXPERIMENT file they refuse (corrupt, edited by hand), which is removed, and records
still marked running that no EXPERIMENT file names (one deleted by hand), which are marked
stopped. Before, a refused file could only be deleted by hand, and its record said running."""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field
from pathlib import Path

from app.artifacts.lock import model_lock
from app.artifacts.store import read_current
from app.registry.experiments import (
    ExperimentError,
    ExperimentRecord,
    experiment_path,
    list_records,
    read_active,
)
from trainer.experiments.lifecycle import announce, end_experiment, write_record

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Stopped:
    records: list[ExperimentRecord] = field(default_factory=list)  # those now stopped
    removed: Path | None = None  # the EXPERIMENT file removed, services having refused it
    refused: str | None = None  # why they refused it


def stop_experiment(
    registry: Path,
    model: str,
    reason: str,
    *,
    redis_url: str | None = None,
    redis_prefix: str = "ltr:",
) -> Stopped:
    registry = Path(registry)
    if not (registry / model).is_dir():  # before the lock would create the directory
        raise ExperimentError(f"model {model!r} runs no experiment")
    with model_lock(registry, model):
        try:
            spec = read_active(registry, model)
        except ExperimentError as exc:
            return _remove_refused(registry, model, reason, str(exc), redis_url, redis_prefix)
        stopped = []
        if spec is not None:
            ended = end_experiment(
                registry, spec, "stopped", reason, redis_url=redis_url, redis_prefix=redis_prefix
            )
            stopped.append(ended)
        # Records no EXPERIMENT file names (deleted by hand, or a stop killed halfway).
        unserved = f"{reason} (no EXPERIMENT file named it: no service served it)"
        stopped += _stop_records(registry, model, unserved, spec.name if spec else None)
    if not stopped:
        raise ExperimentError(f"model {model!r} runs no experiment")
    return Stopped(stopped)


def _remove_refused(
    registry: Path,
    model: str,
    reason: str,
    refused: str,
    redis_url: str | None,
    redis_prefix: str,
) -> Stopped:
    path = experiment_path(registry, model)
    try:
        path.read_bytes()
    except OSError as exc:  # perhaps readable by the services' user: not ours to judge
        raise ExperimentError(
            f"{path}: cannot read ({exc.strerror}); not removed: fix its permissions, or "
            "remove it by hand"
        ) from None
    path.unlink()
    log.warning("removed %s, which services refuse: %s", path, refused)
    stopped = _stop_records(registry, model, f"{reason} (its EXPERIMENT file was refused)")
    current = read_current(registry, model)
    if current is not None:
        announce(redis_url, redis_prefix, model, current)
    return Stopped(stopped, path, refused)


def _stop_records(
    registry: Path, model: str, reason: str, serving: str | None = None
) -> list[ExperimentRecord]:
    """Marks `model`'s records still running stopped, but the experiment `serving`."""
    stopped = []
    for record in list_records(registry):
        spec = record.spec
        if spec.model == model and record.status == "running" and spec.name != serving:
            ended = ExperimentRecord(
                spec=spec, status="stopped", ended_at=dt.datetime.now(dt.UTC), reason=reason
            )
            write_record(registry, ended)
            stopped.append(ended)
    return stopped
